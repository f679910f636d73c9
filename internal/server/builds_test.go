package server

import (
	"testing"

	"github.com/space-platform/space/internal/controlplane"
)

// A build sandbox has the defaults' size, serve's when none are given,
// and never less than buildMemoryMB of memory.
func TestBuildShape(t *testing.T) {
	d := DefaultConfig().Defaults
	limits, disk := buildShape(controlplane.Defaults{})
	if limits.VCPUs != d.VCPUs || limits.MemoryMB != max(d.MemoryMB, buildMemoryMB) || disk != int64(d.DiskMB)<<20 {
		t.Fatalf("no defaults: %+v, %d bytes; want serve's defaults", limits, disk)
	}
	limits, disk = buildShape(controlplane.Defaults{VCPUs: 3, MemoryMB: 256, DiskMB: 2048, Pids: 99})
	if limits.VCPUs != 3 || limits.MemoryMB != buildMemoryMB || limits.Pids != 99 || disk != 2048<<20 {
		t.Fatalf("small defaults: %+v, %d bytes", limits, disk)
	}
}
