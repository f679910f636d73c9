package microvm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/runtimetest"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/template"
)

// minimalImage is the minimal template's root image, built once from
// template.WriteMinimalRootfs into the test pool; every sandbox of the
// conformance cases clones it.
var minimalImage struct {
	once sync.Once
	path string
	err  error
}

func minimalTemplateImage(t *testing.T) string {
	t.Helper()
	minimalImage.once.Do(func() {
		dir, err := env.pool.Create("minimal")
		if err != nil {
			minimalImage.err = err
			return
		}
		tree := filepath.Join(env.dir, "minimal-rootfs")
		if err := os.Mkdir(tree, 0o755); err != nil {
			minimalImage.err = err
			return
		}
		if err := template.WriteMinimalRootfs(context.Background(), tree); err != nil {
			minimalImage.err = err
			return
		}
		r := &Runtime{}
		minimalImage.err = r.PrepareTemplate(context.Background(), tree, dir)
		minimalImage.path = filepath.Join(dir, ArtifactImage)
	})
	if minimalImage.err != nil {
		t.Fatalf("minimal template image: %v", minimalImage.err)
	}
	return minimalImage.path
}

// The microVM backend passes the runtime conformance suite on real QEMU
// (TCG here), 128 MiB guests with one vCPU on minimal-template images.
// Its guests have a kernel of their own, so an allocation past their
// memory is refused inside (GuestOOM) instead of ending the sandbox.
func TestConformance(t *testing.T) {
	requireEnv(t)
	tpl := minimalTemplateImage(t)
	runtimetest.Run(t, func(t *testing.T) runtimetest.Harness {
		state := filepath.Join(t.TempDir(), "state")
		_, slot := runtimetest.Slots(t, filepath.Join(t.TempDir(), "netns"))
		// QEMU serves one QMP client at a time: a new backend object is a
		// restarted server, so the one before it lets go first.
		var last *Runtime
		clone := func(t *testing.T, src string) runtime.Rootfs {
			name := "conf-" + sandboxid.New()
			dir, err := env.pool.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.pool.Delete(name) })
			img := filepath.Join(dir, "rootfs.img")
			if err := CloneImage(context.Background(), src, img); err != nil {
				t.Fatal(err)
			}
			return runtime.Rootfs{Kind: runtime.RootfsBlock, Path: img}
		}
		return runtimetest.Harness{
			New: func(t *testing.T) runtime.Runtime {
				if last != nil {
					last.Close()
				}
				r, err := New(context.Background(), Config{
					Kernel: env.kernel, StateDir: state, Accel: "tcg",
					Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
				})
				if err != nil {
					t.Fatal(err)
				}
				last = r
				return r
			},
			Rootfs:      func(t *testing.T) runtime.Rootfs { return clone(t, tpl) },
			CopyRootfs:  func(t *testing.T, from runtime.Rootfs) runtime.Rootfs { return clone(t, from.Path) },
			Slot:        slot,
			Agent:       env.agent,
			Limits:      runtime.Limits{VCPUs: 1, MemoryMB: 128, Pids: 512},
			GuestOOM:    true,
			OOMMemoryMB: 128,
			// TCG boots take about ten seconds here; the restore case
			// boots one guest and restores two.
			Timeout: 5 * time.Minute,
		}
	})
}
