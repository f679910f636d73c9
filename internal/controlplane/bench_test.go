package controlplane

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/store"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// BenchmarkPauseResumeBolt is the control plane's own cost of two
// lifecycle operations (four durable state changes) on bbolt, the store of
// `space serve`, with a node that does nothing.
func BenchmarkPauseResumeBolt(b *testing.B) {
	fn := newFakeNode()
	fn.alive["a"] = true
	cp := newBenchCP(b, fn, sandbox("a", apiv1.StateRunning))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := cp.Pause(ctx, "a"); err != nil {
			b.Fatal(err)
		}
		if _, err := cp.Resume(ctx, "a"); err != nil {
			b.Fatal(err)
		}
		if _, err := cp.Get(project.Everything, "a"); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchCP(b *testing.B, fn *fakeNode, sandboxes ...Sandbox) *ControlPlane {
	st, err := store.Open(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	for _, s := range sandboxes {
		if err := st.Put(sandboxBucket, s.ID, s); err != nil {
			b.Fatal(err)
		}
	}
	cp := New(Config{Store: st, Nodes: OneNode("local", fn), LocalNode: "local", Templates: fakeTemplates{}})
	if err := cp.Recover(context.Background()); err != nil {
		b.Fatal(err)
	}
	return cp
}
