package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/pkg/apiv1"
)

// On a hybrid cgroup host every process of a sandbox is in /space/<id> of
// the v2 hierarchy as well as of the v1 controllers: outside the cgroup of
// the process that started it, so that stopping the node's container (a
// Kubernetes node pod restart) does not kill it. This machine is such a
// host.
func TestSandboxLeavesTheServersCgroups(t *testing.T) {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/unified", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skip("not a hybrid cgroup host: runsc places sandboxes itself")
	}
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids/space", sb.ID, "cgroup.procs"))
	if err != nil {
		t.Fatalf("the sandbox's v1 cgroup: %v", err)
	}
	pids := strings.Fields(string(procs))
	if len(pids) < 2 {
		t.Fatalf("sandbox processes %v, want the gofer and the sandbox at least", pids)
	}
	want := "0::/space/" + sb.ID
	for _, pid := range pids {
		data, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		if err != nil {
			continue // exited meanwhile
		}
		if !strings.Contains(string(data), want+"\n") {
			t.Errorf("process %s of %s is elsewhere in the v2 hierarchy:\n%s", pid, sb.ID, data)
		}
	}
}
