package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// space serve lists its one node, "local", with this machine's figures
// and what its sandboxes commit, and refuses what needs a cluster.
func TestServeListsItsOneNode(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "minimal", VCPUs: 1, MemoryMB: 256})

	nodes, err := env.client.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 {
		t.Fatalf("space serve lists %d nodes: %+v", len(nodes), nodes)
	}
	n := nodes[0]
	if n.ID != "local" || n.State != apiv1.NodeReady || n.VCPUs < 1 || n.MemoryMB < 256 || n.DiskMB <= 0 ||
		n.MemoryFreeMB <= 0 || n.MemoryFreeMB > n.MemoryMB || n.DiskFreeMB <= 0 || n.DiskFreeMB > n.DiskMB || n.LastHeartbeat.IsZero() {
		t.Fatalf("local node = %+v", n)
	}
	if n.Sandboxes < 1 || n.VCPUsCommitted < sb.VCPUs || n.MemoryCommittedMB < sb.MemoryMB {
		t.Fatalf("local node does not count sandbox %s (%d vCPUs, %d MiB): %+v", sb.ID, sb.VCPUs, sb.MemoryMB, n)
	}
	if !slices.Contains(n.Templates, sb.TemplateID) {
		t.Fatalf("local node does not list template %s that its sandbox runs: %v", sb.TemplateID, n.Templates)
	}
	if got, err := env.client.GetNode(ctx, "local"); err != nil || got.ID != "local" {
		t.Fatalf("GetNode(local) = %+v, %v", got, err)
	}
	if _, err := env.client.GetNode(ctx, "elsewhere"); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("GetNode of another node: %v, want 404", err)
	}
	if _, err := env.client.CordonNode(ctx, "local"); !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), "cordon needs a cluster") {
		t.Fatalf("cordon of serve's node: %v, want 409", err)
	}
	if _, err := env.client.RemoveNode(ctx, "local", true); !isStatus(err, http.StatusConflict) {
		t.Fatalf("remove of serve's node: %v, want 409", err)
	}

	out, errOut, code := space(t, "", "node", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[1])[:2], []string{"local", "ready"}) {
		t.Fatalf("space node ls: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = space(t, "", "node", "drain", "local")
	if code != 1 || !strings.HasPrefix(errOut, "space: ") || !strings.Contains(errOut, "drain needs a cluster") {
		t.Fatalf("space node drain local: exit %d, %q", code, errOut)
	}
}
