package storage

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requireSimpleQuotas fails unless the pool runs simple quotas: this
// kernel (≥ 6.7) has them, and a pool that fell back to full qgroups would
// bring back the cleaner's back-reference walks on every delete.
func requireSimpleQuotas(t *testing.T, p *Pool) {
	t.Helper()
	mode := quotaMode(sysfsDir(context.Background(), p.Root()))
	if mode != quotaModeSimple {
		t.Fatalf("quota mode %q, want %q", mode, quotaModeSimple)
	}
}

func TestNewPoolUsesSimpleQuotas(t *testing.T) {
	p, _ := openTestPool(t)
	requireSimpleQuotas(t, p)
}

// makeTemplate makes a read-only volume holding mib MiB of data.
func makeTemplate(t *testing.T, p *Pool, name string, mib int) {
	t.Helper()
	dir, err := p.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := fillUntilFull(t, filepath.Join(dir, "data"), mib); err != nil {
		t.Fatal(err)
	}
	if err := p.SetReadOnly(name, true); err != nil {
		t.Fatal(err)
	}
}

// Simple quotas charge a snapshot only for what it writes; the limit must
// still mean everything the volume sees, its template's data included.
func TestLimitCountsWhatASnapshotShares(t *testing.T) {
	p, _ := openTestPool(t)
	requireSimpleQuotas(t, p)
	makeTemplate(t, p, "templates/t", 24)
	// Two snapshots: the second finds the template's size measured.
	for _, name := range []string{"sandboxes/a/rootfs", "sandboxes/b/rootfs"} {
		dir, err := p.Snapshot("templates/t", name, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetLimit(name, 32<<20); err != nil {
			t.Fatal(err)
		}
		// 24 MiB shared + 16 MiB written > 32 MiB.
		if err := fillUntilFull(t, filepath.Join(dir, "big"), 16); !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("%s: writing 16 MiB beyond a 24 MiB template under a 32 MiB limit: %v, want EDQUOT", name, err)
		}
		if err := os.Remove(filepath.Join(dir, "big")); err != nil {
			t.Fatal(err)
		}
		if err := p.Sync(name); err != nil {
			t.Fatal(err)
		}
		if err := fillUntilFull(t, filepath.Join(dir, "small"), 4); err != nil {
			t.Fatalf("%s: writing 4 MiB of the 8 left: %v", name, err)
		}
	}
}

// A data directory whose filesystem got full qgroups from an earlier
// version is moved to simple quotas, and the limits it had still hold.
func TestFullQgroupsAreSwitchedToSimpleKeepingLimits(t *testing.T) {
	opts := testPoolOptions(t)
	opts.fullQgroups = true
	old, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Unmount() })
	if mode := quotaMode(sysfsDir(context.Background(), old.Root())); mode != quotaModeFull {
		t.Fatalf("quota mode %q with full qgroups asked for", mode)
	}
	vol, err := old.Create("sandboxes/s/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetLimit("sandboxes/s/rootfs", 16<<20); err != nil {
		t.Fatal(err)
	}
	opts.fullQgroups = false
	p, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	requireSimpleQuotas(t, p)
	if err := fillUntilFull(t, filepath.Join(vol, "big"), 64); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("writing 64 MiB under a 16 MiB limit kept across the switch: %v, want EDQUOT", err)
	}
}

// The qgroup of a deleted volume goes once its tree is dropped, with no
// clear-stale pass: stale qgroups pile up into the thousands otherwise.
func TestDeletedVolumesLeaveNoQgroups(t *testing.T) {
	p, _ := openTestPool(t)
	requireSimpleQuotas(t, p)
	if _, err := p.Create("templates/t"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		name := "sandboxes/s" + string(rune('0'+i)) + "/rootfs"
		dir, err := p.Snapshot("templates/t", name, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := fillUntilFull(t, filepath.Join(dir, "w"), 2); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(strings.TrimSuffix(name, "/rootfs")); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the cleaner to drop the deleted trees; a commit wakes it
	// (otherwise it waits for the next periodic one, 30 s away).
	if out, err := exec.Command("btrfs", "filesystem", "sync", p.Root()).CombinedOutput(); err != nil {
		t.Fatalf("filesystem sync: %v: %s", err, out)
	}
	if out, err := exec.Command("btrfs", "subvolume", "sync", p.Root()).CombinedOutput(); err != nil {
		t.Fatalf("subvolume sync: %v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("btrfs", "qgroup", "show", "--sync", p.Root()).CombinedOutput()
		if err != nil {
			t.Fatalf("qgroup show: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "<stale>") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("qgroups of deleted volumes remain:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A write limit caps only what the volume writes: a disk image snapshotted
// from a template may fill to its size whatever the template holds.
func TestWriteLimitIgnoresWhatASnapshotShares(t *testing.T) {
	p, _ := openTestPool(t)
	requireSimpleQuotas(t, p)
	makeTemplate(t, p, "templates/t", 24)
	dir, err := p.Snapshot("templates/t", "sandboxes/a/rootfs", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetWriteLimit("sandboxes/a/rootfs", 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := fillUntilFull(t, filepath.Join(dir, "fits"), 24); err != nil {
		t.Fatalf("writing 24 MiB beside a 24 MiB template under a 32 MiB write limit: %v", err)
	}
	if err := fillUntilFull(t, filepath.Join(dir, "big"), 16); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("writing 40 MiB under a 32 MiB write limit: %v, want EDQUOT", err)
	}
}
