package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/runtimetest"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/template"
)

// A sandbox whose runsc state is gone while its processes run (a runsc
// restore killed halfway, when the control-plane replica that asked for
// it died) is still destroyed whole: TestClusterReplicas found such a
// sandbox running after its delete had been answered.
func TestDestroyKillsProcessesRunscLostTrackOf(t *testing.T) {
	root, runsc := requireRunsc(t)
	agent := buildStatic(t, root, "./cmd/space-agent", "space-agent")
	state := t.TempDir()
	t.Cleanup(func() { storage.UnmountUnder(state) })
	slots, slot := runtimetest.Slots(t, filepath.Join(state, "netns"))
	rt, err := New(Config{RunscPath: runsc, StateDir: state, Namespaces: slots})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	if err := template.WriteMinimalRootfs(context.Background(), rootfs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := sandboxid.New()
	spec := runtime.Spec{
		ID: id, Rootfs: runtime.Rootfs{Kind: runtime.RootfsDir, Path: rootfs}, Network: slot(t, id), Agent: agent,
		Env: []string{"SPACE_AGENT_TOKEN=tok"}, Hostname: id, Limits: runtime.Limits{VCPUs: 1, MemoryMB: 256, Pids: 512},
	}
	if err := rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	if len(rt.strays(id)) == 0 {
		t.Fatal("no runsc-sandbox or runsc-gofer process names the running sandbox: the test would prove nothing")
	}
	// What runsc keeps of the sandbox goes; its processes stay.
	lost, _ := filepath.Glob(filepath.Join(state, "runsc", "*"+id+"*"))
	for _, p := range lost {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("state after its runsc state went: %v, want not found", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if pids := rt.strays(id); len(pids) > 0 {
		t.Fatalf("processes %v of the sandbox outlived its destroy", pids)
	}
}
