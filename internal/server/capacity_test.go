package server

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A node's disk is its volumes' filesystem's size, so the free disk it
// reports beside it never exceeds it. It was what was free when the node
// started: once a sandbox's disk was freed, a one-house node reported
// 11,593 MiB free of 11,591 (TestServeListsItsOneNode). Here 64 MiB is
// written, the capacity read, the file removed: what is free then must
// still fit in the capacity.
func TestNodeDiskIsTheFilesystemsSize(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "fill")
	if err := os.WriteFile(f, make([]byte, 64<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	c := nodeCapacity(dir)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	free := int(fs.Bavail * uint64(fs.Bsize) >> 20)
	if c.DiskMB <= 0 || free > c.DiskMB {
		t.Fatalf("capacity %d MiB of disk, %d MiB free after removing a file", c.DiskMB, free)
	}
	if c.VCPUs < 1 || c.MemoryMB < 1 {
		t.Fatalf("capacity %+v", c)
	}
}
