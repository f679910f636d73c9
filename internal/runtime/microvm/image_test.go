package microvm

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestResolveModulesOrdersDependenciesFirst(t *testing.T) {
	dep := strings.Join([]string{
		"kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko",
		"kernel/lib/crc16.ko:",
		"kernel/fs/mbcache.ko:",
		"kernel/fs/jbd2/jbd2.ko:",
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko",
		"kernel/net/core/failover.ko:",
		"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/virtio/virtio_ring.ko:",
		"kernel/arch/x86/crypto/crc32c-intel.ko:",
	}, "\n")
	order, err := resolveModules(strings.NewReader(dep), []string{"virtio_net", "ext4", "crc32c_intel"})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range order {
		if _, dup := pos[moduleName(m)]; dup {
			t.Errorf("%s listed twice", m)
		}
		pos[moduleName(m)] = i
	}
	for _, before := range [][2]string{
		{"virtio_ring", "virtio"}, {"virtio", "virtio_net"}, {"failover", "net_failover"},
		{"net_failover", "virtio_net"}, {"jbd2", "ext4"}, {"mbcache", "ext4"}, {"crc16", "ext4"},
	} {
		a, okA := pos[before[0]]
		b, okB := pos[before[1]]
		if !okA || !okB || a > b {
			t.Errorf("%s must load before %s: %v", before[0], before[1], order)
		}
	}
	if _, ok := pos["crc32c_intel"]; !ok {
		t.Errorf("a dashed module name was not found: %v", order)
	}
	if _, err := resolveModules(strings.NewReader(dep), []string{"no_such"}); err == nil {
		t.Error("an unknown module resolved")
	}
}

// TestCPIONewcLayout reads the archive back field by field, and with
// cpio(1) too where it is installed.
func TestCPIONewcLayout(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	c.Dir("space", 0o755)
	c.File("space/hello", 0o644, []byte("hello"))
	c.Symlink("init", "space/hello")
	c.CharDev("console", 0o600, 5, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if len(data)%4 != 0 {
		t.Errorf("archive length %d is not 4-aligned", len(data))
	}
	type entry struct {
		name  string
		mode  uint64
		data  string
		rdevM uint64
	}
	var got []entry
	for off := 0; off < len(data); {
		h := string(data[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, rdevMajor, nameSize := field(1), field(6), field(9), field(11)
		nameStart := off + 110
		name := string(data[nameStart : nameStart+int(nameSize)-1])
		dataStart := (nameStart + int(nameSize) + 3) &^ 3
		body := string(data[dataStart : dataStart+int(size)])
		off = (dataStart + int(size) + 3) &^ 3
		if name == "TRAILER!!!" {
			break
		}
		got = append(got, entry{name, mode, body, rdevMajor})
	}
	want := []entry{
		{"space", cpioDir | 0o755, "", 0},
		{"space/hello", cpioFile | 0o644, "hello", 0},
		{"init", cpioSymlink | 0o777, "space/hello", 0},
		{"console", cpioCharDev | 0o600, "", 5},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if cpio, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command(cpio, "-t")
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "space/hello") {
			t.Errorf("cpio -t: %v: %s", err, out)
		}
	}
}

func TestImageBuildAndReflinkClone(t *testing.T) {
	requireEnv(t)
	// The template image (TestMain built it with mkfs.ext4 -d) is sparse.
	fi, err := os.Stat(env.template)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	if out, err := exec.Command("du", "-B1", env.template).Output(); err == nil {
		used, _ = strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	}
	t.Logf("template image: %d MiB apparent, %d MiB used", fi.Size()>>20, used>>20)
	if used == 0 || used*2 > fi.Size() {
		t.Errorf("image is not sparse: %d of %d bytes used", used, fi.Size())
	}
	if out, err := exec.Command("e2fsck", "-fn", env.template).CombinedOutput(); err != nil {
		t.Errorf("e2fsck: %v: %s", err, out)
	}

	dir, err := env.pool.Create("clone-test")
	if err != nil {
		t.Fatal(err)
	}
	defer env.pool.Delete("clone-test")
	const n = 5
	var total time.Duration
	for i := range n {
		start := time.Now()
		if err := CloneImage(context.Background(), env.template, filepath.Join(dir, "c"+strconv.Itoa(i)+".img")); err != nil {
			t.Fatal(err)
		}
		total += time.Since(start)
	}
	t.Logf("reflink clone of a %d MiB image: %s on average", fi.Size()>>20, (total / n).Round(time.Microsecond))
	// A write to a clone leaves the template as it was.
	clone := filepath.Join(dir, "c0.img")
	f, err := os.OpenFile(clone, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xAB}, 4096), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	orig, _ := os.Open(env.template)
	defer orig.Close()
	block := make([]byte, 4096)
	if _, err := orig.ReadAt(block, 1<<20); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if bytes.Equal(block, bytes.Repeat([]byte{0xAB}, 4096)) {
		t.Error("a write to a clone reached the template")
	}

	// Where blocks cannot be shared, cloning fails instead of copying.
	if fsType(t, os.TempDir()) != "btrfs" {
		err := CloneImage(context.Background(), env.template, filepath.Join(t.TempDir(), "copy.img"))
		if err == nil {
			t.Error("clone across filesystems succeeded: it copied")
		} else if strings.Contains(err.Error(), env.template) {
			t.Errorf("clone error names a host path: %v", err)
		}
	}
}

func fsType(t *testing.T, dir string) string {
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
