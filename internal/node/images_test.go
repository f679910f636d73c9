package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
)

func testNode(t *testing.T) *Node {
	t.Helper()
	return &Node{cfg: Config{ImagesDir: t.TempDir()}, log: slog.Default(), sandboxes: map[string]*Sandbox{}}
}

// mkImage makes a checkpoint image directory under the node's images dir;
// complete marks it whole.
func mkImage(t *testing.T, n *Node, rel string, complete bool) {
	t.Helper()
	dir := filepath.Join(n.cfg.ImagesDir, filepath.FromSlash(rel))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	if complete {
		if err := markComplete(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// Images lists checkpoint images, whole or torn (by the name they were
// meant for), and never template images; Image tells complete ones.
func TestImagesListsCheckpointImagesOnly(t *testing.T) {
	n, ctx := testNode(t), context.Background()
	mkImage(t, n, "a/suspend", true)
	mkImage(t, n, "a/snapshots/s1", true)
	mkImage(t, n, "b/branches/c1.partial", false)
	mkImage(t, n, "templates/tpl1", true)
	mkImage(t, n, "c/suspend", false) // torn without its scratch name
	// A stray file beside images does not make their directory one.
	if err := os.WriteFile(filepath.Join(n.cfg.ImagesDir, "a", "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.cfg.ImagesDir, "d", "snapshots"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := n.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/snapshots/s1", "a/suspend", "b/branches/c1", "c/suspend"}
	if !slices.Equal(got, want) {
		t.Fatalf("Images = %v, want %v", got, want)
	}
	info, err := n.Image(ctx, "a/suspend")
	if err != nil || !info.Complete || info.SizeBytes < 100 {
		t.Fatalf("Image(a/suspend) = %+v, %v; want complete, at least 100 bytes", info, err)
	}
	if info, err := n.Image(ctx, "b/branches/c1"); err != nil || info.Complete {
		t.Fatalf("Image of a torn image = %+v, %v; want incomplete", info, err)
	}
	if info, err := n.Image(ctx, "e/suspend"); err != nil || info.Complete || info.SizeBytes != 0 {
		t.Fatalf("Image of a missing image = %+v, %v; want empty", info, err)
	}
	tpls, err := n.TemplateImages(ctx)
	if err != nil || !slices.Equal(tpls, []string{"tpl1"}) {
		t.Fatalf("TemplateImages = %v, %v; want [tpl1]", tpls, err)
	}
}

// DeleteImage removes the image, its scratch directory and the parents it
// leaves empty, and nothing else; a missing image is not an error.
func TestDeleteImageRemovesEmptyParents(t *testing.T) {
	n, ctx := testNode(t), context.Background()
	mkImage(t, n, "a/snapshots/s1", true)
	mkImage(t, n, "a/snapshots/s1.partial", false)
	mkImage(t, n, "a/suspend", true)
	mkImage(t, n, "b/snapshots/s2", true)
	for _, name := range []string{"a/snapshots/s1", "b/snapshots/s2", "b/snapshots/s2", "c/suspend"} {
		if err := n.DeleteImage(ctx, name); err != nil {
			t.Fatalf("DeleteImage(%s): %v", name, err)
		}
	}
	for _, gone := range []string{"a/snapshots", "b"} {
		if _, err := os.Stat(filepath.Join(n.cfg.ImagesDir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s left after its last image was deleted: %v", gone, err)
		}
	}
	if got, _ := n.Images(ctx); !slices.Equal(got, []string{"a/suspend"}) {
		t.Fatalf("Images after deletes = %v, want [a/suspend]", got)
	}
	if _, err := os.Stat(n.cfg.ImagesDir); err != nil {
		t.Fatalf("the images dir itself went: %v", err)
	}
}

// Names that could leave the images dir, or reach template images or a
// checkpoint's scratch directory, are refused before any path is made.
func TestImageNamesAreValidated(t *testing.T) {
	n, ctx := testNode(t), context.Background()
	mkImage(t, n, "templates/tpl1", true)
	for _, bad := range []string{"", "../x", "a/../../x", "/etc", "a//b", "templates/tpl1", "a/suspend.partial", "a/b c"} {
		if err := n.DeleteImage(ctx, bad); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("DeleteImage(%q) = %v, want ErrInvalidName", bad, err)
		}
		if _, err := n.Image(ctx, bad); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("Image(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(n.cfg.ImagesDir, "templates", "tpl1")); err != nil {
		t.Fatalf("a template image went: %v", err)
	}
	for _, bad := range []string{"", "A", "../x", "abc", "abcdefghijklmnopqrs/"} {
		if err := n.Destroy(ctx, bad); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("Destroy(%q) = %v, want ErrInvalidName", bad, err)
		}
		if err := n.Suspend(ctx, bad, "x/suspend"); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("Suspend(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	if err := n.DeleteVolume(ctx, "../../etc"); !errors.Is(err, nodeapi.ErrInvalidName) {
		t.Errorf("DeleteVolume(../../etc) = %v, want ErrInvalidName", err)
	}
	if err := n.DropTemplateImage(ctx, "a/b"); !errors.Is(err, nodeapi.ErrInvalidName) {
		t.Errorf("DropTemplateImage(a/b) = %v, want ErrInvalidName", err)
	}
}

// The sweep's pruning removes directories that hold no image, deepest
// first, and leaves images and template images alone.
func TestPruneImageDirs(t *testing.T) {
	n := testNode(t)
	mkImage(t, n, "a/suspend", true)
	for _, d := range []string{"gone/snapshots", "a/branches", "templates/empty"} {
		if err := os.MkdirAll(filepath.Join(n.cfg.ImagesDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.pruneImageDirs(); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"gone", "a/branches"} {
		if _, err := os.Stat(filepath.Join(n.cfg.ImagesDir, gone)); !os.IsNotExist(err) {
			t.Errorf("empty %s left: %v", gone, err)
		}
	}
	for _, kept := range []string{"a/suspend", "templates/empty"} {
		if _, err := os.Stat(filepath.Join(n.cfg.ImagesDir, kept)); err != nil {
			t.Errorf("%s went: %v", kept, err)
		}
	}
}
