package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mount, btrfs)")
	}
}

type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logRecorder) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// openTestPool opens a btrfs pool on a small loop image in a temp dir and
// unmounts it (detaching the loop device) when the test ends.
// testPoolOptions places a pool's 1 GiB image in a test's own directory.
func testPoolOptions(t *testing.T) Options {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	return Options{
		Root:           filepath.Join(dir, "volumes"),
		ImagePath:      filepath.Join(dir, "volumes.img"),
		ImageSizeBytes: 1 << 30,
		Logf:           t.Logf,
	}
}

func openTestPool(t *testing.T) (*Pool, Options) {
	t.Helper()
	opts := testPoolOptions(t)
	p, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		if devs, _ := loopDevicesFor(context.Background(), opts.ImagePath); len(devs) > 0 {
			t.Errorf("loop devices left attached: %v", devs)
		}
	})
	if p.Kind() != KindBtrfs {
		t.Fatalf("Kind() = %q, want btrfs", p.Kind())
	}
	return p, opts
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSnapshotIsolation(t *testing.T) {
	p, _ := openTestPool(t)
	testSnapshotIsolation(t, p)
}

func TestCopyBackend(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(context.Background(), Options{Root: filepath.Join(dir, "volumes"), ForceCopy: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind() != KindCopy {
		t.Fatalf("Kind() = %q, want copy", p.Kind())
	}
	testSnapshotIsolation(t, p)
	if err := p.SetLimit("templates/a", 1<<20); !errors.Is(err, ErrNoLimits) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SetLimit on copy backend: %v, want ErrNoLimits", err)
	}
	if n, err := p.Usage("templates/a"); err != nil || n <= 0 {
		t.Fatalf("Usage = %d, %v", n, err)
	}
	if err := p.Delete("sandboxes/s1"); err != nil {
		t.Fatal(err)
	}
	if p.Exists("sandboxes/s1/rootfs") {
		t.Fatal("sandbox volume still exists after Delete")
	}
}

func testSnapshotIsolation(t *testing.T, p *Pool) {
	src, err := p.Create("templates/a")
	if err != nil {
		t.Fatal(err)
	}
	if src != p.Path("templates/a") {
		t.Fatalf("Create returned %s, Path says %s", src, p.Path("templates/a"))
	}
	writeFile(t, filepath.Join(src, "shared"), "original")
	if _, err := p.Create("templates/a"); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create over existing volume: %v, want ErrExist", err)
	}

	dst, err := p.Snapshot("templates/a", "sandboxes/s1/rootfs", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dst, "shared")); got != "original" {
		t.Fatalf("snapshot sees %q, want original", got)
	}
	writeFile(t, filepath.Join(dst, "shared"), "changed in snapshot")
	writeFile(t, filepath.Join(dst, "new"), "only in snapshot")

	if got := readFile(t, filepath.Join(src, "shared")); got != "original" {
		t.Fatalf("source changed to %q by a write in the snapshot", got)
	}
	if _, err := os.Stat(filepath.Join(src, "new")); !os.IsNotExist(err) {
		t.Fatalf("file created in snapshot is visible in source: %v", err)
	}
	if err := p.Sync("sandboxes/s1/rootfs"); err != nil {
		t.Fatal(err)
	}

	names, err := p.List("sandboxes")
	if err != nil || len(names) != 1 || names[0] != "sandboxes/s1" {
		t.Fatalf("List(sandboxes) = %v, %v", names, err)
	}
	if names, err := p.List("nothing-here"); err != nil || len(names) != 0 {
		t.Fatalf("List of missing prefix = %v, %v", names, err)
	}
}

func TestReadOnly(t *testing.T) {
	p, _ := openTestPool(t)
	src, err := p.Create("templates/a")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "f"), "x")

	ro, err := p.Snapshot("templates/a", "templates/b", true)
	if err != nil {
		t.Fatal(err)
	}
	err = os.WriteFile(filepath.Join(ro, "f"), []byte("y"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write into read-only snapshot: %v, want EROFS", err)
	}

	if err := p.SetReadOnly("templates/a", true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after SetReadOnly(true): %v, want EROFS", err)
	}
	if err := p.SetReadOnly("templates/a", false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "g"), "writable again")

	// Read-only volumes are still deletable.
	if err := p.Delete("templates/b"); err != nil {
		t.Fatal(err)
	}
	if p.Exists("templates/b") {
		t.Fatal("read-only volume survived Delete")
	}
}

func TestDeleteIdempotentAndNested(t *testing.T) {
	p, _ := openTestPool(t)
	if err := p.Delete("sandboxes/never-existed"); err != nil {
		t.Fatalf("deleting a missing volume: %v", err)
	}
	if _, err := p.Create("sandboxes/s1/rootfs"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create("sandboxes/s1/rootfs/nested"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create("sandboxes/s1/rootfs/nested/deeper"); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReadOnly("sandboxes/s1/rootfs/nested", true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReadOnly("sandboxes/s1/rootfs", true); err != nil {
		t.Fatal(err)
	}
	// A read-only volume holding nested (read-only) volumes.
	if err := p.Delete("sandboxes/s1/rootfs"); err != nil {
		t.Fatal(err)
	}
	if p.Exists("sandboxes/s1/rootfs") {
		t.Fatal("volume survived Delete")
	}
	// A plain directory holding a volume.
	if _, err := p.Create("sandboxes/s2/rootfs"); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete("sandboxes/s2"); err != nil {
		t.Fatal(err)
	}
	if p.Exists("sandboxes/s2") {
		t.Fatal("directory survived Delete")
	}
	if err := p.Delete("sandboxes/s2"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	for _, bad := range []string{"", "/abs", "../escape", "a/../../b", "a//b"} {
		if err := p.Delete(bad); err == nil {
			t.Errorf("Delete(%q) accepted an invalid name", bad)
		}
	}
}

func TestQuotaEnforced(t *testing.T) {
	p, _ := openTestPool(t)
	dir, err := p.Create("sandboxes/s1/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 16 << 20
	if err := p.SetLimit("sandboxes/s1/rootfs", limit); err != nil {
		t.Fatal(err)
	}
	writeErr := fillUntilFull(t, filepath.Join(dir, "big"), 64)
	if !errors.Is(writeErr, syscall.EDQUOT) {
		t.Fatalf("writing 64 MiB under a 16 MiB limit: %v, want EDQUOT", writeErr)
	}
	used, err := p.Usage("sandboxes/s1/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	if used <= 0 || used > limit {
		t.Fatalf("Usage = %d, want within (0, %d]", used, limit)
	}
	// Lifting the limit lets writes through again.
	if err := p.SetLimit("sandboxes/s1/rootfs", 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "more"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatalf("write after removing limit: %v", err)
	}
	if err := p.Delete("sandboxes/s1"); err != nil {
		t.Fatal(err)
	}
}

// fillUntilFull writes up to mib MiB into a new file at path and syncs it,
// and returns the first write error (nil when all of it fit).
func fillUntilFull(t *testing.T, path string, mib int) error {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xab}, 1<<20)
	for i := 0; i < mib; i++ {
		if _, err := f.Write(chunk); err != nil {
			return err
		}
	}
	return f.Sync()
}

func TestReopenAfterCrash(t *testing.T) {
	p, opts := openTestPool(t)
	dir, err := p.Create("templates/keep")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "data"), "survives")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// "Crash": the process is gone but the mount is not.
	p2, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Kind() != KindBtrfs {
		t.Fatalf("reopened Kind() = %q", p2.Kind())
	}
	if got := readFile(t, filepath.Join(p2.Path("templates/keep"), "data")); got != "survives" {
		t.Fatalf("after reopen: %q", got)
	}
	assertLoopDevices(t, opts.ImagePath, 1)

	// Mount gone but a loop device still attached (e.g. a lazy unmount
	// by someone else): Open must reuse that device.
	if out, err := exec.Command("umount", opts.Root).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	if out, err := exec.Command("losetup", "-f", "--show", opts.ImagePath).CombinedOutput(); err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	assertLoopDevices(t, opts.ImagePath, 1)
	p3, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p3.Kind() != KindBtrfs || !p3.Exists("templates/keep/data") {
		t.Fatalf("after remount: kind %s, data exists %v", p3.Kind(), p3.Exists("templates/keep/data"))
	}
	assertLoopDevices(t, opts.ImagePath, 1)

	// Fully unmounted: Open mounts the existing image again, no mkfs.
	if err := p3.Unmount(); err != nil {
		t.Fatal(err)
	}
	assertLoopDevices(t, opts.ImagePath, 0)
	p4, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !p4.Exists("templates/keep/data") {
		t.Fatal("data lost after unmount and reopen")
	}
	assertLoopDevices(t, opts.ImagePath, 1)
}

func assertLoopDevices(t *testing.T, image string, want int) {
	t.Helper()
	devs, err := loopDevicesFor(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != want {
		t.Fatalf("loop devices for %s: %v, want %d", image, devs, want)
	}
}

func TestFallbackToCopyWhenMkfsFails(t *testing.T) {
	requireRoot(t)
	// A mkfs.btrfs that always fails, found first on PATH.
	bin := t.TempDir()
	writeFile(t, filepath.Join(bin, "mkfs.btrfs"), "#!/bin/sh\necho 'simulated failure' >&2\nexit 1\n")
	if err := os.Chmod(filepath.Join(bin, "mkfs.btrfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	dir := t.TempDir()
	var log logRecorder
	p, err := Open(context.Background(), Options{
		Root:           filepath.Join(dir, "volumes"),
		ImagePath:      filepath.Join(dir, "volumes.img"),
		ImageSizeBytes: 1 << 30,
		Logf:           log.logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind() != KindCopy {
		t.Fatalf("Kind() = %q, want copy fallback", p.Kind())
	}
	if !strings.Contains(log.text(), "WARNING") || !strings.Contains(log.text(), "simulated failure") {
		t.Fatalf("fallback not logged with the cause: %q", log.text())
	}
	if _, err := os.Stat(filepath.Join(dir, "volumes.img")); !os.IsNotExist(err) {
		t.Fatalf("failed image left behind: %v", err)
	}
	if _, err := p.Create("templates/a"); err != nil {
		t.Fatal(err)
	}
}

// Btrfs stops all qgroup accounting once it marks its numbers inconsistent
// (removing a qgroup that still shows usage, a snapshot it cannot account
// for quickly, dropping a deep shared tree), and a limit then never trips.
// The pool must notice and have the numbers rebuilt before relying on one.
func TestQuotaEnforcedAfterAccountingWentInconsistent(t *testing.T) {
	p := openFullQgroupsPool(t)
	if _, err := p.Create("templates/t"); err != nil {
		t.Fatal(err)
	}
	// A snapshot assigned to a higher-level qgroup is one the kernel
	// cannot account for quickly; it marks the numbers inconsistent.
	root := p.Root()
	if out, err := exec.Command("btrfs", "qgroup", "create", "1/100", root).CombinedOutput(); err != nil {
		t.Fatalf("qgroup create: %v: %s", err, out)
	}
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", "-i", "1/100",
		filepath.Join(root, "templates/t"), filepath.Join(root, "templates/t2")).CombinedOutput(); err != nil {
		t.Fatalf("snapshot: %v: %s", err, out)
	}
	if !quotaInconsistent(t, p) {
		t.Skip("this kernel accounted the snapshot without going inconsistent; nothing to test")
	}
	dir, err := p.Snapshot("templates/t", "sandboxes/s1/rootfs", false)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 16 << 20
	if err := p.SetLimit("sandboxes/s1/rootfs", limit); err != nil {
		t.Fatal(err)
	}
	if quotaInconsistent(t, p) {
		t.Fatal("SetLimit returned while qgroup accounting was still inconsistent")
	}
	err = os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte{1}, 64<<20), 0o644)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("writing 64 MiB under a 16 MiB limit: %v, want EDQUOT", err)
	}
}

// openFullQgroupsPool opens a pool on full qgroups, as kernels older than
// 6.7 (without simple quotas) have it.
func openFullQgroupsPool(t *testing.T) *Pool {
	t.Helper()
	opts := testPoolOptions(t)
	opts.fullQgroups = true
	p, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return p
}

func quotaInconsistent(t *testing.T, p *Pool) bool {
	t.Helper()
	out, err := exec.Command("btrfs", "qgroup", "show", p.Root()).CombinedOutput()
	if err != nil {
		t.Fatalf("qgroup show: %v: %s", err, out)
	}
	return bytes.Contains(out, []byte("inconsistent"))
}

func TestUnmountUnderDetachesNestedMountsDeepestFirst(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "a"), filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", outer).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", inner).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	UnmountUnder(dir)
	for _, p := range []string{inner, outer} {
		if _, mounted := mountSource(p); mounted {
			t.Errorf("%s is still mounted", p)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
}

// mountOptions returns the per-mount options of the mount at dir, as
// /proc/self/mountinfo lists them.
func mountOptions(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint options ...
		if f := strings.Fields(line); len(f) > 5 && unescapeMountinfo(f[4]) == dir {
			opts = strings.Split(f[5], ",") // the topmost mount's, when stacked
		}
	}
	if opts == nil {
		t.Fatalf("%s is not a mount point", dir)
	}
	return opts
}

// The volumes hold what images, builds and sandboxes wrote: their setuid
// programs and device nodes must not work on the host. A mount an earlier
// version made without the options gets them when the pool opens again.
func TestVolumeMountIsNosuidNodev(t *testing.T) {
	p, opts := openTestPool(t)
	check := func(when string) {
		t.Helper()
		got := mountOptions(t, opts.Root)
		if !slices.Contains(got, "nosuid") || !slices.Contains(got, "nodev") {
			t.Errorf("%s: the volumes are mounted %v, want nosuid and nodev", when, got)
		}
	}
	check("mounted")

	if err := unix.Mount("", opts.Root, "", unix.MS_REMOUNT|unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if got := mountOptions(t, opts.Root); slices.Contains(got, "nosuid") {
		t.Fatalf("the remount as an earlier version mounted it kept nosuid: %v", got)
	}
	p.Close()
	if _, err := Open(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	check("reopened over an earlier version's mount")
}
