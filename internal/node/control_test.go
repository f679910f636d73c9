package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// rootVolumes places every volume under one directory; nothing else of
// Volumes is used by the tests that take it.
type rootVolumes struct {
	Volumes
	root string
}

func (v rootVolumes) Path(string) string { return v.root }

// Info reports the capacity the node was configured with, what it holds
// and what is free.
func TestInfoReportsCapacityAndUse(t *testing.T) {
	n := testNode(t)
	n.cfg.ID = "node-1"
	n.cfg.Capacity = Capacity{VCPUs: 4, MemoryMB: 8192, DiskMB: 100000}
	n.cfg.Volumes = rootVolumes{root: t.TempDir()}
	mkImage(t, n, "templates/tpl1", true)
	mkImage(t, n, "templates/torn", false)
	n.sandboxes["aaaaaaaaaaaaaaaaaaaa"] = &Sandbox{ID: "aaaaaaaaaaaaaaaaaaaa"}
	n.pools.byTpl = map[string]*warmPool{
		"tpl1": {size: 2, ready: []string{"bbbbbbbbbbbbbbbbbbbb"}},
		"gone": {},
	}
	info, err := n.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "node-1" || info.VCPUs != 4 || info.MemoryMB != 8192 || info.DiskMB != 100000 {
		t.Fatalf("capacity %+v; want the configured one", info)
	}
	if info.Sandboxes != 1 || info.DiskFreeMB <= 0 || info.MemoryFreeMB <= 0 {
		t.Fatalf("use %+v; want 1 sandbox and the free disk and memory", info)
	}
	if !slices.Equal(info.TemplateImages, []string{"tpl1"}) {
		t.Fatalf("template images %v; want the complete one only", info.TemplateImages)
	}
	if len(info.Pools) != 1 || info.Pools["tpl1"].Size != 2 || info.Pools["tpl1"].Ready != 1 {
		t.Fatalf("pools %v; want tpl1 with 1 of 2 ready", info.Pools)
	}
}

// blockingVolumes holds a create at its first step (the root volume's
// snapshot) until release is closed, then fails it.
type blockingVolumes struct {
	rootVolumes
	entered chan struct{}
	release chan struct{}
}

func (v blockingVolumes) Snapshot(string, string, bool) (string, error) {
	close(v.entered)
	<-v.release
	return "", errors.New("no volume here")
}
func (v blockingVolumes) Delete(string) error { return nil }

// destroyOnly is a runtime whose sandboxes are all gone already.
type destroyOnly struct{ runtime.Runtime }

func (destroyOnly) Destroy(context.Context, string) error { return nil }
func (destroyOnly) Isolation() string                     { return runtime.IsolationGVisor }

// Info counts the limits of a sandbox from the moment its create is
// accepted (placement must see creates in flight), together with those of
// pooled and restored ones, and stops counting when the create fails or
// the sandbox is released.
func TestInfoCountsCommittedLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the network namespace directory is a mount: needs root")
	}
	n := testNode(t)
	vols := blockingVolumes{rootVolumes: rootVolumes{root: t.TempDir()}, entered: make(chan struct{}), release: make(chan struct{})}
	n.cfg.Volumes = vols
	n.cfg.Runtimes = map[string]runtime.Runtime{runtime.GVisor: destroyOnly{}}
	ns, err := network.OpenNamespaces(filepath.Join(t.TempDir(), "netns"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	n.cfg.Namespaces = ns

	// A pooled sandbox and a resumed one hold their limits too.
	n.commit("pppppppppppppppppppp", runtime.Limits{VCPUs: 1, MemoryMB: 64})
	n.commit("rrrrrrrrrrrrrrrrrrrr", runtime.Limits{VCPUs: 2, MemoryMB: 512})

	done := make(chan error, 1)
	go func() {
		done <- n.Create(context.Background(), nodeapi.CreateRequest{Spec: CreateSpec{
			ID:       "cccccccccccccccccccc",
			Template: TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl"},
			Limits:   runtime.Limits{VCPUs: 4, MemoryMB: 1024},
		}})
	}()
	<-vols.entered
	info, err := n.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.VCPUsCommitted != 7 || info.MemoryCommittedMB != 1600 {
		t.Fatalf("committed %d vCPUs, %d MB while a create runs; want 7 and 1600", info.VCPUsCommitted, info.MemoryCommittedMB)
	}
	close(vols.release)
	if err := <-done; err == nil {
		t.Fatal("create succeeded without a root volume")
	}
	if err := n.release(context.Background(), "rrrrrrrrrrrrrrrrrrrr"); err != nil {
		t.Fatal(err)
	}
	info, err = n.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.VCPUsCommitted != 1 || info.MemoryCommittedMB != 64 {
		t.Fatalf("committed %d vCPUs, %d MB after a failed create and a release; want the pooled one's 1 and 64", info.VCPUsCommitted, info.MemoryCommittedMB)
	}
}
