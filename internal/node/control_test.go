package node

import (
	"context"
	"slices"
	"testing"
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
