package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
// v2 hierarchy of a hybrid host; elsewhere it does nothing. A process
// that forks while the list is being moved may leave a child behind in
// the parent's cgroup (the child is born where its parent still was), so
// the move repeats until a pass finds nothing left to move.
func leaveUnifiedParent(id string) error {
	if !cgroupfs.IsV2(unifiedRoot) {
		return nil
	}
	dir := filepath.Join(unifiedRoot, "space", id)
	made := false
	for pass := 0; pass < maxUnifiedPasses; pass++ {
		pids := v1Procs(id)
		if pids == nil {
			return nil // runsc made no v1 cgroup: nothing to mirror
		}
		if !made {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup of %s in the v2 hierarchy: %w", id, hostpath.Pathless(err))
			}
			made = true
		}
		there, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("processes of %s in the v2 hierarchy: %w", id, hostpath.Pathless(err))
		}
		moved := 0
		for _, pid := range pids {
			if slices.Contains(strings.Fields(string(there)), pid) {
				continue
			}
			err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644)
			if errors.Is(err, syscall.ESRCH) { // a process that exited meanwhile
				continue
			}
			if err != nil {
				return fmt.Errorf("move process %s of %s in the v2 hierarchy: %w", pid, id, hostpath.Pathless(err))
			}
			moved++
		}
		if moved == 0 {
			return nil
		}
	}
	return fmt.Errorf("move the processes of %s in the v2 hierarchy: still forking outside it after %d passes", id, maxUnifiedPasses)
}

// maxUnifiedPasses bounds leaveUnifiedParent's repeats: a sandbox that is
// starting forks a handful of processes, not an endless stream.
const maxUnifiedPasses = 20

// v1Procs lists the processes of sandbox id's v1 cgroup (nil when runsc
// made none).
func v1Procs(id string) []string {
	for _, c := range v1Listers {
		data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", c, "space", id, "cgroup.procs"))
		if err == nil {
			return append([]string{}, strings.Fields(string(data))...)
		}
	}
	return nil
}

// removeUnified removes what leaveUnifiedParent made, once the sandbox's
// processes are gone.
func removeUnified(id string) {
	_ = os.Remove(filepath.Join(unifiedRoot, "space", id))
}
