package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		line  string
		name  string
		ppid  int
		ticks int64
		ok    bool
	}{
		{"812 (btrfs-cleaner) S 2 0 0 0 -1 2129984 0 0 0 0 7 1989 0 0 20 0 1 0 1234 0 0", "btrfs-cleaner", 2, 1996, true},
		// A command may hold spaces and parentheses: the last ")" ends it.
		{"77 (kworker/u4:1-(btrfs) x) I 2 0 0 0 -1 69238880 0 0 0 0 0 45 0 0 20 0 1 0 9", "kworker/u4:1-(btrfs) x", 2, 45, true},
		{"1 (init) S 0 1 1 0 -1 4194560 100 0 0 0 3", "", 0, 0, false}, // cut short
		{"garbage", "", 0, 0, false},
	} {
		name, ppid, ticks, ok := parseStat(c.line)
		if ok != c.ok || ok && (name != c.name || ppid != c.ppid || ticks != c.ticks) {
			t.Errorf("parseStat(%q) = %q, %d, %d, %v; want %q, %d, %d, %v", c.line, name, ppid, ticks, ok, c.name, c.ppid, c.ticks, c.ok)
		}
	}
}

// Only kthreadd's children count, btrfs-cleaner on its own as well; other
// processes, and entries that are not processes, are left out.
func TestReadKernelCPU(t *testing.T) {
	root := t.TempDir()
	stat := func(pid, line string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat("2", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 1 0 0")
	stat("812", "812 (btrfs-cleaner) S 2 0 0 0 -1 2129984 0 0 0 0 7 193 0 0 20 0 1 0 1234 0 0")
	stat("90", "90 (kworker/1:2-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 50 0 0 20 0 1 0 9 0 0")
	stat("4000", "4000 (space) S 1 4000 4000 0 -1 4194560 0 0 0 0 900 900 0 0 20 0 30 0 99 0 0")
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := readKernelCPU(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got.all != 2500*time.Millisecond || got.cleaner != 2000*time.Millisecond {
		t.Errorf("kernel threads %s, btrfs-cleaner %s; want 2.5s and 2s", got.all, got.cleaner)
	}
	if _, err := readKernelCPU(t.TempDir(), 100); err == nil {
		t.Error("a /proc without kernel threads read as none busy")
	}
}
