package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// sizedBackend is a fakeBackend whose restores keep the size the image
// was booted at, as a VM's do.
type sizedBackend struct{ *fakeBackend }

func (sizedBackend) RestoreKeepsBootLimits() bool { return true }

// A template built for two backends has a pre-booted image on each: a
// warm create on either is a restore of that backend's own image. On a
// backend whose restores keep the boot's size, the image is of the
// create's size, one per size up to maxSizedImages (a further size boots);
// a pool of a template whose default is that backend restores from an
// image of the pool's size; the default backend's image stays where
// images were before; dropping the template drops every image.
func TestWarmCreatesOnEachBackend(t *testing.T) {
	tb := newTwoBackendNode(t)
	tb.sized = true
	n := tb.start(t)
	ctx := context.Background()
	tpl := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.GVisor, "fakevm"}}
	if _, err := n.cfg.Volumes.Create(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	create := func(id, rt string, memoryMB int) {
		t.Helper()
		err := n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: id, Template: tpl, AccessToken: "t", Runtime: rt,
			Limits: runtime.Limits{VCPUs: 1, MemoryMB: memoryMB}}, Warm: true})
		if err != nil {
			t.Fatalf("create %s on %s: %v", id, rt, err)
		}
	}
	restored := func(f *fakeBackend, id string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.restored, id)
	}
	started := func(f *fakeBackend) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.started)
	}
	bootID := "tpl" + tpl.ID

	create("aaaaaaaaaaaaaaaaaaaa", runtime.GVisor, 128)
	if !restored(tb.gvisor, "aaaaaaaaaaaaaaaaaaaa") || tb.vm.holds("aaaaaaaaaaaaaaaaaaaa") {
		t.Fatal("the create on the default backend was not a restore of its image")
	}
	if !imageComplete(filepath.Join(n.cfg.ImagesDir, "templates", "tpl")) {
		t.Fatal("the default backend's image is not where images always were")
	}
	create("bbbbbbbbbbbbbbbbbbbb", "fakevm", 128)
	if !restored(tb.vm, "bbbbbbbbbbbbbbbbbbbb") {
		t.Fatal("the warm create on the second backend booted")
	}
	if got := tb.vm.specOf(bootID).Limits; got.MemoryMB != 128 || got.VCPUs != 1 {
		t.Fatalf("the second backend's image was booted with %+v; want the create's 1 vCPU and 128 MiB", got)
	}
	boots := started(tb.vm)
	create("cccccccccccccccccccc", "fakevm", 128)
	if !restored(tb.vm, "cccccccccccccccccccc") || started(tb.vm) != boots {
		t.Fatal("a second create of the same size did not reuse the image")
	}
	// Three more sizes fill maxSizedImages; the next one boots.
	for i, id := range []string{"dddddddddddddddddddd", "eeeeeeeeeeeeeeeeeeee", "ffffffffffffffffffff"} {
		create(id, "fakevm", 256+128*i)
		if !restored(tb.vm, id) || tb.vm.specOf(bootID).Limits.MemoryMB != 256+128*i {
			t.Fatalf("create %s of %d MiB: not restored from an image of its size", id, 256+128*i)
		}
	}
	create("gggggggggggggggggggg", "fakevm", 1024)
	if restored(tb.vm, "gggggggggggggggggggg") || !tb.vm.holds("gggggggggggggggggggg") {
		t.Fatalf("a create of a %d-th size was restored; want it booted", maxSizedImages+1)
	}
	if imgs, err := n.TemplateImages(ctx); err != nil || !slices.Equal(imgs, []string{"tpl"}) {
		t.Fatalf("TemplateImages = %v, %v; want [tpl] once", imgs, err)
	}

	// A pool of a template whose default backend keeps the boot's size.
	vmTpl := TemplateSpec{ID: "vmtpl", RootfsVolume: "templates/vmtpl", Runtimes: []string{"fakevm"}}
	if _, err := n.cfg.Volumes.Create(vmTpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	limits := PoolLimits{Limits: runtime.Limits{VCPUs: 1, MemoryMB: 192}}
	if err := n.SetPool(ctx, nodeapi.PoolRequest{Template: vmTpl, Limits: limits, Size: 1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := n.Pool(ctx, vmTpl.ID); st.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool never filled")
		}
	}
	if got := tb.vm.specOf("tpl" + vmTpl.ID).Limits; got.MemoryMB != 192 {
		t.Fatalf("the pool's image was booted with %+v; want the pool's 192 MiB", got)
	}
	res, err := n.Claim(ctx, nodeapi.ClaimRequest{TemplateID: vmTpl.ID, Limits: limits})
	if err != nil || !res.Claimed || !restored(tb.vm, res.ID) {
		t.Fatalf("claim: %+v, %v; want a sandbox restored on fakevm", res, err)
	}
	if err := n.SetPool(ctx, nodeapi.PoolRequest{Template: vmTpl}); err != nil {
		t.Fatal(err)
	}
	// The claim started a refill: it ends (and releases what it made)
	// before the test's directories go.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n.pools.mu.Lock()
		filling := n.pools.byTpl[vmTpl.ID].filling
		n.pools.mu.Unlock()
		if !filling {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool's refill never ended")
		}
	}

	if err := n.DropTemplateImage(ctx, tpl.ID); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(n.cfg.ImagesDir, "templates", "tpl*"))
	vols, _ := filepath.Glob(n.cfg.Volumes.Path("templates/tpl-booted*"))
	if len(left) != 0 || len(vols) != 0 {
		t.Fatalf("after the drop: images %v, volumes %v", left, vols)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.ImagesDir, "templates", "vmtpl@fakevm-1cpu-192mb")); err != nil {
		t.Fatalf("another template's image went with the drop: %v", err)
	}
}
