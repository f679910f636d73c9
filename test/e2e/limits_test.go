package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Writing past disk_mb fails inside the sandbox; the sandbox goes on.
// gVisor may hold written pages in its own cache and write them to the
// volume later, so the quota error shows at the latest when data is synced
// (dd conv=fsync), as it would on a network file system.
func TestDiskLimitIsEnforced(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{DiskMB: 64})
	res, err := env.client.Exec(testContext(t), sb.ID, apiv1.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/home/user/big bs=1M count=128 conv=fsync 2>&1; echo status $?"},
	})
	if err != nil {
		t.Fatalf("disk fill: %v", err)
	}
	if strings.Contains(res.Stdout, "status 0") {
		t.Fatalf("a 64 MiB disk took a 128 MiB file:\n%s", res.Stdout)
	}
	execOK(t, sb.ID, "rm -f /home/user/big; echo fine > /home/user/after")
}

// A sandbox that goes past memory_mb is killed by the host (gVisor has no
// OOM killer of its own); the platform notices and fails it with the reason.
func TestMemoryLimitIsEnforced(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{MemoryMB: 64})
	ctx := testContext(t)
	// 16 MiB in tmpfs (sandbox memory) fits.
	execOK(t, sb.ID, "dd if=/dev/zero of=/dev/shm/small bs=1M count=16 2>/dev/null && rm /dev/shm/small")
	res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/dev/shm/big bs=1M count=256 2>&1; echo status $?"},
	})
	if err == nil && strings.Contains(res.Stdout, "status 0") {
		t.Fatalf("a 64 MiB sandbox held 256 MiB in memory: %+v", res)
	}
	got, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateFailed, 30*time.Second)
	if err != nil || !strings.Contains(got.Reason, "memory") {
		t.Fatalf("sandbox after exceeding its memory: %+v, %v; want failed for memory", got, err)
	}
}
