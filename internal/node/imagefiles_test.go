package node

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/storage"
)

// A captured volume of a disk-booting backend is read inside its image
// through the same calls as a tree: a file, a directory's pages, a
// symlink reported, a missing path 404, and a damaged image a 422 that
// names no host path. A persistent volume holding a file of the image's
// name stays a tree.
func TestReadVolumeInsideRootImage(t *testing.T) {
	n := btrfsNode(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	n.cfg.Runtimes = map[string]runtime.Runtime{"vm": blockBackend{}}
	ctx := context.Background()
	tree := t.TempDir()
	for _, f := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(tree, f), []byte("file "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(tree, "l")); err != nil {
		t.Fatal(err)
	}
	pool := n.cfg.Volumes.(*storage.Pool)
	mkVolume := func(name string, image []byte) {
		dir, err := pool.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(dir, "root.img")
		if image != nil {
			if err := os.WriteFile(img, image, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", tree, img, "16M").CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
	}
	mkVolume("snapshots/good", nil)
	mkVolume("snapshots/bad", []byte(strings.Repeat("not ext4", 1<<14)))

	body, info, err := n.ReadVolumeFile(ctx, "snapshots/good", "/b")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if string(got) != "file b" || info.GetSize() != 6 || info.GetType() != filesystempb.FileType_FILE_TYPE_FILE {
		t.Fatalf("read /b: %q %+v", got, info)
	}
	if _, info, err := n.ReadVolumeFile(ctx, "snapshots/good", "/"); err != nil || info.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("read /: %+v %v", info, err)
	}
	if _, _, err := n.ReadVolumeFile(ctx, "snapshots/good", "/l"); statusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("read a symlink: %v", err)
	}
	if _, _, err := n.ReadVolumeFile(ctx, "snapshots/good", "/nope"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("read a missing path: %v", err)
	}
	// Pages of two: a b, c l (byte-wise order), each entry as for a tree.
	var names []string
	cursor := ""
	for range 3 {
		page, err := n.ListVolumeDir(ctx, "snapshots/good", "/", ListOptions{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for {
			e, err := page.Next()
			if err != nil {
				break
			}
			names = append(names, e.GetName())
			if e.GetName() == "l" && e.GetType() != filesystempb.FileType_FILE_TYPE_SYMLINK {
				t.Errorf("l listed as %v", e.GetType())
			}
			if e.GetModifiedTime().AsTime().IsZero() || e.GetOwner() == "" {
				t.Errorf("entry %s lacks time or owner: %+v", e.GetName(), e)
			}
		}
		cursor = page.NextCursor()
		page.Close()
		if cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != "a,b,c,l,lost+found" {
		t.Errorf("pages list %v", names)
	}
	if _, err := n.ListVolumeDir(ctx, "snapshots/good", "/", ListOptions{Depth: 2}); statusOf(err) != http.StatusBadRequest {
		t.Errorf("a deep listing: %v", err)
	}

	_, _, err = n.ReadVolumeFile(ctx, "snapshots/bad", "/b")
	if statusOf(err) != http.StatusUnprocessableEntity || strings.Contains(err.Error(), pool.Path("")) {
		t.Fatalf("a damaged image: %v", err)
	}
	t.Logf("a damaged image: %v", err)

	// A persistent volume is the user's files, even one named so.
	if err := n.CreateVolume(ctx, "persistent/p", 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.cfg.Volumes.Path("persistent/p"), "root.img"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	body, _, err = n.ReadVolumeFile(ctx, "persistent/p", "/root.img")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(body)
	body.Close()
	if string(got) != "mine" {
		t.Fatalf("persistent volume read %q", got)
	}
}
