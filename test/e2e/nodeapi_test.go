package e2e

import (
	"strconv"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/runtime"
)

// nodeHarness runs the node contract's cases on the server's real node,
// reached through node (the node itself or a client of it).
func nodeHarness(t *testing.T, node nodeapi.Node) nodeapitest.Harness {
	tpl, err := env.srv.TemplateSpec("minimal")
	if err != nil {
		t.Fatalf("minimal template: %v", err)
	}
	d := env.cfg.Defaults
	_, transfers := env.srv.Node().(nodeapi.Transfer)
	_, builds := env.srv.Node().(nodeapi.Templates)
	return nodeapitest.Harness{
		Node:     node,
		Template: tpl,
		Limits:   runtime.Limits{VCPUs: d.VCPUs, MemoryMB: d.MemoryMB, Pids: d.Pids},
		DiskMB:   d.DiskMB,
		Real:     true,
		// A client always has the methods; the node behind it may not.
		NoTransfer:   !transfers,
		TemplateName: "minimal",
		NoTemplates:  !builds,
		Kill:         func(t *testing.T, id string) { loseRuntime(id) },
		EchoServer: func(port int) []string {
			return []string{"nc", "-ll", "-p", strconv.Itoa(port), "-e", "cat"}
		},
	}
}

// The conformance suite passes on the real node in process and over the
// node RPC (loopback h2c, cluster token).
func TestNodeConformance(t *testing.T) {
	requireServer(t)
	t.Run("InProcess", func(t *testing.T) {
		nodeapitest.Run(t, func(t *testing.T) nodeapitest.Harness { return nodeHarness(t, env.srv.Node()) })
	})
	t.Run("OverRPC", func(t *testing.T) {
		client := overRPC(t, env.srv.Node())
		nodeapitest.Run(t, func(t *testing.T) nodeapitest.Harness { return nodeHarness(t, client) })
	})
}
