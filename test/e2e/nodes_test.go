package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// space serve lists its one node, the node of its node-id file, with this
// machine's figures and what its sandboxes commit, as it is now; it is a
// cluster's node (cordon works).
func TestServeListsItsOneNode(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "minimal", VCPUs: 1, MemoryMB: 256})

	data, err := os.ReadFile(filepath.Join(env.dataDir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(data))
	// As it is now, not as its last heartbeat said.
	nodes, err := env.client.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 {
		t.Fatalf("space serve lists %d nodes: %+v", len(nodes), nodes)
	}
	n := nodes[0]
	if n.ID != id || n.Address != "inproc://"+id || n.State != apiv1.NodeReady || n.VCPUs < 1 || n.MemoryMB < 256 || n.DiskMB <= 0 ||
		n.MemoryFreeMB <= 0 || n.MemoryFreeMB > n.MemoryMB || n.DiskFreeMB <= 0 || n.DiskFreeMB > n.DiskMB || n.LastHeartbeat.IsZero() {
		t.Fatalf("node %s = %+v", id, n)
	}
	if n.Sandboxes < 1 || n.VCPUsCommitted < sb.VCPUs || n.MemoryCommittedMB < sb.MemoryMB {
		t.Fatalf("node %s does not count sandbox %s (%d vCPUs, %d MiB): %+v", id, sb.ID, sb.VCPUs, sb.MemoryMB, n)
	}
	if !slices.Contains(n.Templates, sb.TemplateID) {
		t.Fatalf("node %s does not list template %s that its sandbox runs: %v", id, sb.TemplateID, n.Templates)
	}
	if got, err := env.client.GetNode(ctx, id); err != nil || got.ID != id {
		t.Fatalf("GetNode(%s) = %+v, %v", id, got, err)
	}
	if _, err := env.client.GetNode(ctx, "elsewhere"); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("GetNode of another node: %v, want 404", err)
	}
	out, errOut, code := space(t, "", "node", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[1])[:2], []string{id, "ready"}) {
		t.Fatalf("space node ls: exit %d\n%s%s", code, out, errOut)
	}
	if got, err := env.client.CordonNode(ctx, id); err != nil || got.State != apiv1.NodeCordoned {
		t.Fatalf("cordon of one house's node: %+v, %v", got, err)
	}
	if got, err := env.client.UncordonNode(ctx, id); err != nil || got.State != apiv1.NodeReady {
		t.Fatalf("uncordon of one house's node: %+v, %v", got, err)
	}
}
