package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/runtimetest"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/template"
)

// The gVisor backend passes the runtime conformance suite on real runsc,
// with minimal-template root filesystems in plain host directories.
func TestConformance(t *testing.T) {
	root, runsc := requireRunsc(t)
	agent := buildStatic(t, root, "./cmd/space-agent", "space-agent")
	runtimetest.Run(t, func(t *testing.T) runtimetest.Harness {
		state := t.TempDir()
		// runsc keeps a mount (null-netns) under its root.
		t.Cleanup(func() { storage.UnmountUnder(state) })
		slots, slot := runtimetest.Slots(t, filepath.Join(state, "netns"))
		return runtimetest.Harness{
			New: func(t *testing.T) runtime.Runtime {
				rt, err := New(Config{RunscPath: runsc, StateDir: state, Namespaces: slots})
				if err != nil {
					t.Fatal(err)
				}
				return rt
			},
			Rootfs: func(t *testing.T) runtime.Rootfs {
				dir := t.TempDir()
				if err := template.WriteMinimalRootfs(context.Background(), dir); err != nil {
					t.Fatalf("minimal rootfs: %v", err)
				}
				return runtime.Rootfs{Kind: runtime.RootfsDir, Path: dir}
			},
			CopyRootfs: func(t *testing.T, from runtime.Rootfs) runtime.Rootfs {
				dir := t.TempDir()
				if out, err := exec.Command("cp", "-a", from.Path+"/.", dir).CombinedOutput(); err != nil {
					t.Fatalf("copy rootfs: %v: %s", err, out)
				}
				return runtime.Rootfs{Kind: runtime.RootfsDir, Path: dir}
			},
			Slot:     slot,
			Agent:    agent,
			Limits:   runtime.Limits{VCPUs: 1, MemoryMB: 256, Pids: 512},
			MinVCPUs: 2, // runsc's floor for --cpu-num-from-quota
		}
	})
}

// buildStatic builds the static (CGO_ENABLED=0) program of the package
// pkg, as the e2e harness builds the agent, so it runs in any sandbox.
func buildStatic(tb testing.TB, root, pkg, name string) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	t.Fatal("no go.mod above the test's directory")
	return ""
}
