package controlplane

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// A create served by the warm pool times the node's claim in
// space_pool_claim_seconds (space bench's floor of create_pooled); a
// create that starts a sandbox of its own adds nothing to it. The
// control plane reports its pools' ready sandboxes (space_pool_ready) on
// every topology.
func TestPooledCreateTimesTheClaim(t *testing.T) {
	reg := metrics.NewRegistry()
	node := nodeapitest.NewFake("local")
	cp := newTestCPWith(t, Config{Metrics: reg, Nodes: OneNode("local", node)}, t.TempDir(), nil)
	metric := func(series string) string {
		var buf bytes.Buffer
		reg.WriteText(&buf)
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.HasPrefix(line, series+" ") {
				return strings.TrimPrefix(line, series+" ")
			}
		}
		t.Fatalf("no %s in\n%s", series, buf.String())
		return ""
	}
	claims := func() string { return metric("space_pool_claim_seconds_count") }

	// Other limits than the pool's: a sandbox of its own.
	own := apiv1.CreateSandboxRequest{Template: "tpl", VCPUs: 1, MemoryMB: 128, TimeoutS: 60}
	s, err := cp.Create(project.Everything, own)
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cp, s.ID)
	if got := claims(); got != "0" {
		t.Fatalf("claims after an unpooled create = %s, want 0", got)
	}

	if _, err := cp.SetPoolSize("tpl", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cp.PoolStatus("tpl").Ready < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("pool never ready: %+v", cp.PoolStatus("tpl"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := metric(`space_pool_ready{template="tpl"}`); got != "1" {
		t.Fatalf("space_pool_ready of tpl = %s, want 1", got)
	}
	d := cp.cfg.Defaults
	pooled := apiv1.CreateSandboxRequest{Template: "tpl", VCPUs: d.VCPUs, MemoryMB: d.MemoryMB, DiskMB: d.DiskMB, TimeoutS: 60}
	s, err = cp.Create(project.Everything, pooled)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != apiv1.StateRunning {
		t.Fatalf("pooled create answered %s, want running (it was not served by the pool)", s.State)
	}
	if got := claims(); got != "1" {
		t.Fatalf("claims after a pooled create = %s, want 1", got)
	}
}
