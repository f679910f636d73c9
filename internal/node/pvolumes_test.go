package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/storage"
)

// btrfsNode is a node whose volumes are a real btrfs pool (a loop image
// under the test's directory, unmounted at the end).
func btrfsNode(t *testing.T) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mount, btrfs)")
	}
	dir := t.TempDir()
	pool, err := storage.Open(context.Background(), storage.Options{Root: filepath.Join(dir, "volumes"), ImageSizeBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Unmount(); err != nil {
			t.Errorf("unmount the pool: %v", err)
		}
	})
	if pool.Kind() != storage.KindBtrfs {
		t.Skip("btrfs is not available here")
	}
	n := testNode(t)
	n.cfg.Volumes = pool
	return n
}

func statusOf(err error) int {
	var ae *AgentError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func readAll(t *testing.T, n *Node, vol, p string) string {
	t.Helper()
	body, _, err := n.ReadVolumeFile(context.Background(), vol, p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	defer body.Close()
	b, _ := io.ReadAll(body)
	return string(b)
}

// A persistent volume is a subvolume under its own qgroup limit: a write
// past it fails as out of space and leaves the file it would have
// replaced as it was, and the room it took is free again at once.
func TestPersistentVolumeLimitAndAtomicWrites(t *testing.T) {
	n := btrfsNode(t)
	ctx := context.Background()
	const vol = "persistent/vol-a"
	if err := n.CreateVolume(ctx, vol, 16); err != nil {
		t.Fatal(err)
	}
	if err := n.CreateVolume(ctx, vol, 16); !errors.Is(err, nodeapi.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	for _, bad := range []string{"persistent/a/b", "sandboxes/x", "persistent/..", "persistent"} {
		if err := n.CreateVolume(ctx, bad, 16); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("create %q: %v, want ErrInvalidName", bad, err)
		}
	}
	if fi, err := os.Stat(n.cfg.Volumes.Path(vol)); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume top: %v %v, want a 0777 directory", fi, err)
	}
	if _, err := n.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: vol, Path: "/keep.txt"}, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	_, err := n.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: vol, Path: "/keep.txt"}, bytes.NewReader(make([]byte, 40<<20)))
	if statusOf(err) != http.StatusInsufficientStorage {
		t.Fatalf("write of 40 MiB into 16: %v, want 507", err)
	}
	if strings.Contains(err.Error(), n.cfg.Volumes.Path("")) {
		t.Fatalf("error names a host path: %v", err)
	}
	if got := readAll(t, n, vol, "/keep.txt"); got != "old" {
		t.Fatalf("a failed overwrite left %d bytes, want the old file", len(got))
	}
	entries, _ := os.ReadDir(n.cfg.Volumes.Path(vol))
	if len(entries) != 1 {
		t.Fatalf("a failed write left files behind: %v", entries)
	}
	if _, err := n.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: vol, Path: "/after"}, bytes.NewReader(make([]byte, 8<<20))); err != nil {
		t.Fatalf("8 MiB after the failed write: %v", err)
	}
	if used, err := n.VolumeUsage(ctx, vol); err != nil || used < 8<<20 || used > 16<<20 {
		t.Fatalf("usage %d, %v", used, err)
	}
	if err := n.DeleteVolume(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if _, err := n.VolumeUsage(ctx, vol); statusOf(err) != http.StatusNotFound {
		t.Fatalf("usage of a deleted volume: %v, want 404", err)
	}
}

// Files operations stay inside the volume whatever a sandbox planted:
// symlinks to the host's root, absolute or relative, lead nowhere.
func TestPersistentVolumeConfinesPaths(t *testing.T) {
	n := btrfsNode(t)
	ctx := context.Background()
	const vol = "persistent/vol-b"
	if err := n.CreateVolume(ctx, vol, 0); err != nil {
		t.Fatal(err)
	}
	top := n.cfg.Volumes.Path(vol)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": outside, "rel": "../../../../../../../../" + outside} {
		if err := os.Symlink(target, filepath.Join(top, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/abs/secret", "/rel/secret"} {
		if body, _, err := n.ReadVolumeFile(ctx, vol, p); err == nil {
			b, _ := io.ReadAll(body)
			t.Fatalf("read %s escaped the volume: %q", p, b)
		}
		if _, err := n.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: vol, Path: p, Parents: true}, strings.NewReader("x")); err == nil {
			t.Fatalf("write %s escaped the volume", p)
		}
		if _, err := n.EditVolume(ctx, nodeapi.VolumeEdit{Volume: vol, Path: p, Op: nodeapi.VolumeRemove}); err == nil {
			if _, serr := os.Stat(filepath.Join(outside, "secret")); serr != nil {
				t.Fatalf("remove %s removed a host file", p)
			}
		}
		mode := uint32(0o777)
		_, _ = n.EditVolume(ctx, nodeapi.VolumeEdit{Volume: vol, Path: p, Op: nodeapi.VolumeChattr, Mode: &mode})
	}
	if fi, err := os.Stat(filepath.Join(outside, "secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the host file was changed through the volume: %v %v", fi, err)
	}
	// A symlink's own entry is described, not followed.
	e, err := n.EditVolume(ctx, nodeapi.VolumeEdit{Volume: vol, Path: "/abs", Op: nodeapi.VolumeStat})
	if err != nil || e.GetSymlinkTarget() != outside {
		t.Fatalf("stat of a symlink: %v %v", e, err)
	}
	// ".." stops at the volume's top.
	if _, err := n.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: vol, Path: "/../../x"}, strings.NewReader("in")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, n, vol, "/x"); got != "in" {
		t.Fatalf("/../../x landed elsewhere: %q", got)
	}
}

// A sandbox's mount points are made inside its root volume; one a
// sandbox's filesystem redirects with a symlink is refused, and nothing is
// made on the host.
func TestRuntimeMountsStayInTheRootVolume(t *testing.T) {
	n := btrfsNode(t)
	ctx := context.Background()
	const vol = "persistent/vol-c"
	if err := n.CreateVolume(ctx, vol, 0); err != nil {
		t.Fatal(err)
	}
	root, err := n.cfg.Volumes.(*storage.Pool).Create("sandboxes/sb1")
	if err != nil {
		t.Fatal(err)
	}
	binds, err := n.runtimeMounts(nil, "sandboxes/sb1", []nodeapi.VolumeMount{{Volume: vol, Path: "/mnt/data"}})
	if err != nil || len(binds) != 1 || binds[0].Source != n.cfg.Volumes.Path(vol) || binds[0].Destination != "/mnt/data" {
		t.Fatalf("mounts: %+v %v", binds, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "mnt", "data")); err != nil || !fi.IsDir() {
		t.Fatalf("mount point not made in the root volume: %v", err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "evil")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.runtimeMounts(nil, "sandboxes/sb1", []nodeapi.VolumeMount{{Volume: vol, Path: "/evil/x"}}); err == nil {
		t.Fatal("a mount point through a symlink out of the root volume was accepted")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("a mount point was made on the host")
	}
	for _, m := range []nodeapi.VolumeMount{{Volume: vol, Path: "/proc/x"}, {Volume: "persistent/vol-gone", Path: "/data"}, {Volume: "sandboxes/sb1", Path: "/data"}} {
		if _, err := n.runtimeMounts(nil, "sandboxes/sb1", []nodeapi.VolumeMount{m}); err == nil {
			t.Errorf("mount %+v accepted", m)
		}
	}
	_ = n.cfg.Volumes.Delete("sandboxes/sb1")
}
