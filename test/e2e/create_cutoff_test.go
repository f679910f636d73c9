package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

// A control-plane replica that dies during a create ends the context of
// its create RPC on the node, which cuts the sandbox's runsc restore off.
// The replica that takes over then does what controlplane.restart does
// (halt, drop the root volume, create again), and the sandbox is later
// deleted: nothing of it may run afterwards. The cut falls every 20 ms
// across the restore, instead of wherever a SIGKILL of a replica happens
// to fall in TestClusterReplicas. (This path did not leak even before
// f10ece2, the fix of that test's flake: the flake's own moment is not
// reproduced here; see docs/testing.md.)
func TestCreateCutOffByItsCallerLeavesNothing(t *testing.T) {
	requireServer(t)
	rpc := overRPC(t, env.srv.Node())
	node := env.srv.Node()
	tpl, err := env.srv.TemplateSpec("minimal")
	if err != nil {
		t.Fatal(err)
	}
	d := env.cfg.Defaults
	spec := func() nodeapi.CreateSpec {
		return nodeapi.CreateSpec{
			ID: sandboxid.New(), Template: tpl, AccessToken: "tok-" + sandboxid.New(), DiskMB: d.DiskMB,
			Limits:  runtime.Limits{VCPUs: d.VCPUs, MemoryMB: d.MemoryMB, Pids: d.Pids},
			Network: network.Policy{Offline: true},
		}
	}
	ctx := testContext(t)
	// The template's pre-booted image exists before the cuts, so that
	// each create is a restore of it.
	warm := spec()
	if err := node.Create(ctx, nodeapi.CreateRequest{Spec: warm, Warm: true}); err != nil {
		t.Fatal(err)
	}
	if err := node.Destroy(ctx, warm.ID); err != nil {
		t.Fatal(err)
	}

	for delay := time.Duration(0); delay <= 320*time.Millisecond; delay += 20 * time.Millisecond {
		s := spec()
		cctx, cut := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rpc.Create(cctx, nodeapi.CreateRequest{Spec: s, Warm: true}) }()
		restoring := waitRestoring(t, s.ID, done)
		time.Sleep(delay)
		cut()
		err := <-done
		t.Logf("cut %s into the restore (seen: %v): create answered %v", delay, restoring, err)

		// The takeover, on the node directly (the dead replica's RPC is
		// gone), then the delete.
		if err := node.Halt(ctx, s.ID); err != nil {
			t.Fatalf("halt after the cut: %v", err)
		}
		if err := node.DeleteVolume(ctx, "sandboxes/"+s.ID); err != nil {
			t.Fatalf("drop the root volume after the cut: %v", err)
		}
		if err := node.Create(ctx, nodeapi.CreateRequest{Spec: s, Warm: true}); err != nil {
			t.Fatalf("create again after the cut: %v", err)
		}
		if err := node.Destroy(ctx, s.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
		waitNoRuntime(t, env.dataDir, s.ID)
	}
}

// waitRestoring waits until a runsc restore of id runs, or the create
// (done) ends first, and reports whether it saw the restore. done is left
// for the caller.
func waitRestoring(t *testing.T, id string, done chan error) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(id)) && bytes.Contains(b, []byte("\x00restore\x00")) {
				return true
			}
		}
		select {
		case err := <-done:
			done <- err
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	t.Fatalf("no runsc restore of %s within a minute", id)
	return false
}
