package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/runtime/cgroupfs"
)

// On a hybrid cgroup host (v1 controllers, and the v2 hierarchy without
// controllers at /sys/fs/cgroup/unified) runsc puts a sandbox in
// /space/<id> of every v1 controller but leaves it in its parent's v2
// cgroup. When the node runs in a container (the Kubernetes DaemonSet)
// that is the container's, and stopping the container kills everything in
// it, sandboxes included, which must outlive a node restart. Moving the
// sandbox's processes to /space/<id> of the v2 hierarchy too puts them
// outside the container there as well, as they are on a v1-only or a
// v2-only host.
const unifiedRoot = "/sys/fs/cgroup/unified"

// v1Listers are v1 controllers whose /space/<id> lists the sandbox's
// processes; the first present is read.
var v1Listers = []string{"pids", "memory", "cpu"}

// leaveUnifiedParent moves sandbox id's processes to /space/<id> of the
// v2 hierarchy of a hybrid host; elsewhere it does nothing.
func leaveUnifiedParent(id string) error {
	if !cgroupfs.IsV2(unifiedRoot) {
		return nil
	}
	var procs []byte
	for _, c := range v1Listers {
		data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", c, "space", id, "cgroup.procs"))
		if err == nil {
			procs = data
			break
		}
	}
	if procs == nil {
		return nil // runsc made no v1 cgroup: nothing to mirror
	}
	dir := filepath.Join(unifiedRoot, "space", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup of %s in the v2 hierarchy: %w", id, hostpath.Pathless(err))
	}
	for _, pid := range strings.Fields(string(procs)) {
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644)
		if err != nil && !errors.Is(err, syscall.ESRCH) { // a process that exited meanwhile
			return fmt.Errorf("move process %s of %s in the v2 hierarchy: %w", pid, id, hostpath.Pathless(err))
		}
	}
	return nil
}

// removeUnified removes what leaveUnifiedParent made, once the sandbox's
// processes are gone.
func removeUnified(id string) {
	_ = os.Remove(filepath.Join(unifiedRoot, "space", id))
}
