package server

import (
	"bufio"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"syscall"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// localNodeID names `space serve`'s one node: in GET /v1/nodes, in the
// node's Info, and on the sandboxes it runs.
const localNodeID = "local"

// localInfo reports the Info of `space serve`'s one node for GET
// /v1/nodes, from this machine and the control plane's records. Once
// *node.Node answers nodeapi.Control's Info itself, the node takes its
// place.
type localInfo struct {
	cp          *controlplane.ControlPlane
	templates   *template.Manager
	volumesRoot string
}

func (l localInfo) Info(context.Context) (nodeapi.Info, error) {
	info := nodeapi.Info{VCPUs: goruntime.NumCPU()}
	total, available, err := readMeminfo()
	if err != nil {
		return info, err
	}
	info.MemoryMB, info.MemoryFreeMB = total>>10, available>>10
	var fs syscall.Statfs_t
	if err := syscall.Statfs(l.volumesRoot, &fs); err != nil {
		return info, fmt.Errorf("read the volumes' disk size: %w", err)
	}
	info.DiskMB, info.DiskFreeMB = int(fs.Blocks*uint64(fs.Bsize)>>20), int(fs.Bavail*uint64(fs.Bsize)>>20)
	cp := l.cp
	// What the node runs: every sandbox but the suspended, stopped and
	// failed ones (pooled sandboxes are the node's, and not counted).
	for _, sb := range cp.List(project.Everything, controlplane.Filter{}) {
		switch sb.State {
		case apiv1.StateSuspended, apiv1.StateStopped, apiv1.StateFailed:
			continue
		}
		info.Sandboxes++
		info.VCPUsCommitted += sb.VCPUs
		info.MemoryCommittedMB += sb.MemoryMB
	}
	for _, t := range l.templates.List() {
		if t.State != template.StateReady {
			continue
		}
		info.Templates = append(info.Templates, t.ID)
		if st := cp.PoolStatus(t.ID); st.Size > 0 {
			if info.Pools == nil {
				info.Pools = map[string]nodeapi.PoolStatus{}
			}
			info.Pools[t.ID] = nodeapi.PoolStatus{Size: st.Size, Ready: st.Ready}
		}
	}
	return info, nil
}

// readMeminfo reads MemTotal and MemAvailable, in KiB.
func readMeminfo() (total, available int, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			total = kb
		} else if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %d kB", &kb); err == nil {
			available = kb
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read memory size: %w", err)
	}
	return total, available, nil
}
