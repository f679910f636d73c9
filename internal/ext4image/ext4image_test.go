package ext4image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// makeImage builds an ext4 image of a small tree with mkfs.ext4 -d, as
// the microVM backend builds root images.
func makeImage(t *testing.T) (img string, big []byte) {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "home/user/sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "home/user/note.txt"), []byte("hello\n"), 0o640))
	must(os.WriteFile(filepath.Join(root, "home/user/sp ace"), []byte("x"), 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(root, "home/user/fast")))
	must(os.Symlink(strings.Repeat("d/", 60)+"f", filepath.Join(root, "home/user/slow")))
	must(os.Symlink("/home/user", filepath.Join(root, "via")))
	must(os.Chown(filepath.Join(root, "home/user/note.txt"), 1000, 1001))
	big = bytes.Repeat([]byte("0123456789abcdef"), 300000) // 4.8 MB, many extents' worth
	big[len(big)-1] = '!'
	must(os.WriteFile(filepath.Join(root, "home/user/big"), big, 0o644))
	must(os.Chtimes(filepath.Join(root, "home/user/note.txt"), time.Time{}, time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)))
	img = filepath.Join(dir, "rootfs.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", root, img, "32M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	must(os.Chmod(img, 0o644))
	return img, big
}

func TestReadsFilesDirsAndLinks(t *testing.T) {
	img, big := makeImage(t)
	im, err := Open(img)
	if err != nil {
		t.Skip(err)
	}
	ctx := context.Background()

	e, err := im.Lstat(ctx, "/home/user/note.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !e.Mode.IsRegular() || e.Mode.Perm() != 0o640 || e.Size != 6 || e.UID != 1000 || e.GID != 1001 || !e.ModTime.Equal(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Errorf("note.txt: %+v", e)
	}
	if got := readAll(t, im, e); string(got) != "hello\n" {
		t.Errorf("note.txt reads %q", got)
	}
	e, err = im.Lstat(ctx, "/home/user/big")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, im, e); !bytes.Equal(got, big) {
		t.Errorf("big: read %d bytes, equal %v", len(got), bytes.Equal(got, big))
	}
	if e, err := im.Lstat(ctx, "/home/user/sp ace"); err != nil || e.Size != 1 {
		t.Errorf("a name with a space: %+v %v", e, err)
	}
	// Symlinks are reported with their target, not followed.
	for p, want := range map[string]string{"/home/user/fast": "/etc/passwd", "/home/user/slow": strings.Repeat("d/", 60) + "f"} {
		e, err := im.Lstat(ctx, p)
		if err != nil || e.Mode&fs.ModeSymlink == 0 || e.Target != want {
			t.Errorf("%s: %+v %v, want a symlink to %q", p, e, err, want)
		}
	}
	// A symlink on the way is resolved inside the image.
	if e, err := im.Lstat(ctx, "/via/note.txt"); err != nil || e.Size != 6 {
		t.Errorf("through an in-image symlink: %+v %v", e, err)
	}
	for _, p := range []string{"/nope", "/home/user/nope"} {
		if _, err := im.Lstat(ctx, p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want ErrNotExist", p, err)
		}
	}
	if _, err := im.Lstat(ctx, "/home/user/note.txt/x"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a path through a file: %v, want ENOTDIR", err)
	}
	for _, p := range []string{"relative", "/a\"b", "/a\nb"} {
		if _, err := im.Lstat(ctx, p); !errors.Is(err, ErrBadPath) {
			t.Errorf("%q: %v, want ErrBadPath", p, err)
		}
	}

	entries, err := im.ReadDir(ctx, "/home/user")
	if err != nil {
		t.Fatal(err)
	}
	if err := im.FillTimes(ctx, entries); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		if e.ModTime.IsZero() {
			t.Errorf("%s has no modification time", e.Name)
		}
	}
	if got := strings.Join(names, ","); got != "big,fast,note.txt,slow,sp ace,sub" {
		t.Errorf("listing: %s", got)
	}
	if _, err := im.ReadDir(ctx, "/home/user/note.txt"); err == nil {
		t.Error("a file listed as a directory")
	}
}

// A corrupt image is a clear error, soon: random bytes, a valid image cut
// short (its files' blocks gone), an image with its inode tables wiped.
func TestCorruptImage(t *testing.T) {
	img, _ := makeImage(t)
	im, err := Open(img)
	if err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	dir := t.TempDir()

	random := filepath.Join(dir, "random.img")
	junk := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1<<18)
	if err := os.WriteFile(random, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ := Open(random)
	if _, err := r.Lstat(ctx, "/"); !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), dir) {
		t.Errorf("random bytes: %v, want ErrCorrupt without the host path", err)
	}

	// Cut after the metadata: the big file's data is gone.
	e, err := im.Lstat(ctx, "/home/user/big")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(img)
	short := filepath.Join(dir, "short.img")
	if err := os.WriteFile(short, data[:6<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := Open(short)
	if e2, err := s.Lstat(ctx, "/home/user/big"); err == nil {
		if e2.Inode != e.Inode {
			t.Fatalf("inode moved: %d", e2.Inode)
		}
		body, err := s.Open(ctx, e2)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, body)
		body.Close()
		if err == nil && n == e.Size {
			t.Log("the cut left the file whole; nothing to check")
		} else if err == nil {
			t.Errorf("short read of %d bytes without an error", n)
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Errorf("cut image: %v", err)
	}

	// Wipe everything past the superblock and group descriptors.
	wiped := append([]byte(nil), data...)
	for i := 64 << 10; i < len(wiped); i++ {
		wiped[i] = 0xff
	}
	w := filepath.Join(dir, "wiped.img")
	if err := os.WriteFile(w, wiped, 0o644); err != nil {
		t.Fatal(err)
	}
	wi, _ := Open(w)
	start := time.Now()
	if _, err := wi.ReadDir(ctx, "/home/user"); err == nil {
		t.Error("a wiped image listed")
	} else {
		t.Logf("wiped image: %v (%s)", err, time.Since(start).Round(time.Millisecond))
	}
}

// debugfs runs as nobody: an image only root may read is refused to it
// (the node's images are made readable for it; a parser of the guest's
// filesystem never runs with privilege).
func TestReaderHasNoPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop")
	}
	img, _ := makeImage(t)
	im, err := Open(img)
	if err != nil {
		t.Skip(err)
	}
	if _, err := im.Lstat(context.Background(), "/"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(img, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Lstat(context.Background(), "/"); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("a root-only image: %v, want debugfs denied", err)
	}
}

func readAll(t *testing.T, im *Image, e Entry) []byte {
	t.Helper()
	body, err := im.Open(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
