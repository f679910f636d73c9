package controlplane

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// vmNode is a cluster node offering both backends, the microVM one under
// emulation; it records the runtime of each create.
type vmNode struct {
	*clusterNode
	runtimes map[string]string // create's sandbox id → runtime asked for
}

func (v *vmNode) Info(context.Context) (nodeapi.Info, error) {
	return nodeapi.Info{Runtimes: map[string]string{"gvisor": "gvisor", "microvm": "microvm-tcg"}}, nil
}

func (v *vmNode) Create(ctx context.Context, req nodeapi.CreateRequest) error {
	v.mu.Lock()
	v.runtimes[req.Spec.ID] = req.Spec.RuntimeName()
	v.mu.Unlock()
	return v.clusterNode.Create(ctx, req)
}

// A create names a runtime its template has (or gets the template's
// default) and the sandbox reports the isolation its node's backend
// gives; a runtime the template lacks, or no runtime at all, is a 400
// naming what there is; a node without the backend refuses.
func TestCreateChoosesTheRuntime(t *testing.T) {
	node := &vmNode{clusterNode: newClusterNode(), runtimes: map[string]string{}}
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", node)}, t.TempDir(), nil)
	create := func(tpl, rt string) (Sandbox, error) {
		req := createReq
		req.Template, req.Runtime = tpl, rt
		return cp.Create(project.Everything, req)
	}
	for _, tc := range []struct{ tpl, rt, want, isolation string }{
		{"tpl", "", "gvisor", "gvisor"},
		{"tpl", "gvisor", "gvisor", "gvisor"},
		{"vm-tpl", "", "microvm", "microvm-tcg"},
		{"vm-tpl", "gvisor", "gvisor", "gvisor"},
	} {
		s, err := create(tc.tpl, tc.rt)
		if err != nil {
			t.Fatalf("create of %s on %q: %v", tc.tpl, tc.rt, err)
		}
		s = waitRunning(t, cp, s.ID)
		api := s.API()
		if api.Runtime != tc.want || api.Isolation != tc.isolation || node.runtimes[s.ID] != tc.want {
			t.Errorf("create of %s on %q: runtime %q, isolation %q, the node was asked for %q; want %q, %q",
				tc.tpl, tc.rt, api.Runtime, api.Isolation, node.runtimes[s.ID], tc.want, tc.isolation)
		}
	}
	for _, tc := range []struct{ tpl, rt, want string }{
		{"tpl", "microvm", "runtime: template tpl has no microvm runtime (it has gvisor)"},
		{"tpl", "firecracker", `runtime: unknown runtime "firecracker" (want one of gvisor, microvm)`},
	} {
		_, err := create(tc.tpl, tc.rt)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create of %s on %q: %v; want an invalid request saying %q", tc.tpl, tc.rt, err, tc.want)
		}
	}

	// A node of gVisor alone has no microvm runtime.
	gOnly := newTestCPWith(t, Config{Nodes: OneNode("local", newClusterNode())}, t.TempDir(), nil)
	req := createReq
	req.Template = "vm-tpl"
	_, err := gOnly.Create(project.Everything, req)
	if !errors.Is(err, cluster.ErrConflict) || !strings.Contains(err.Error(), "has no microvm runtime") {
		t.Fatalf("create on microvm on a gVisor node: %v; want a conflict saying the node has no microvm runtime", err)
	}
}

// Snapshots and branches keep the source's runtime, and a snapshot of one
// runtime is not restored into a sandbox of another.
func TestSnapshotsKeepTheRuntime(t *testing.T) {
	fn := newFakeNode()
	vm := sandbox("v", apiv1.StateRunning)
	vm.Runtime, vm.Isolation = "microvm", "microvm-tcg"
	for _, id := range []string{"g", "v"} {
		fn.alive[id] = true
		fn.volumes["sandboxes/"+id] = true
	}
	cp := newTestCP(t, fn, sandbox("g", apiv1.StateRunning), vm)
	ctx := context.Background()
	snap, err := cp.CreateSnapshot(ctx, "v", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.RuntimeName() != "microvm" {
		t.Fatalf("the snapshot of a microvm sandbox is of %s", snap.RuntimeName())
	}
	_, err = cp.Restore(ctx, project.Everything, "g", "v/s1")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "taken under the microvm runtime and sandbox g runs on gvisor") {
		t.Fatalf("restore of a microvm snapshot into a gVisor sandbox: %v; want a refusal", err)
	}
	req := createReq
	req.Snapshot, req.Runtime = "v/s1", "gvisor"
	if _, err := cp.Create(project.Everything, req); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "runs on that one") {
		t.Fatalf("a gvisor sandbox from a microvm snapshot: %v; want a refusal", err)
	}
	req.Runtime = ""
	s, err := cp.Create(project.Everything, req)
	if err != nil {
		t.Fatal(err)
	}
	if api := s.API(); api.Runtime != "microvm" || api.Isolation != "microvm-tcg" {
		t.Fatalf("a sandbox from a microvm snapshot reports %q, %q", api.Runtime, api.Isolation)
	}
	branches, err := cp.Branch(ctx, "v", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range branches {
		if api := b.API(); api.Runtime != "microvm" || api.Isolation != "microvm-tcg" {
			t.Fatalf("a branch of a microvm sandbox reports %q, %q", api.Runtime, api.Isolation)
		}
	}
}
