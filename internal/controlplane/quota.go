package controlplane

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// Usage is what a project holds now, as its quota counts it.
type Usage struct {
	Sandboxes int
	MemoryMB  int
	Snapshots int
	VolumeMB  int
}

// Usage returns project p's usage.
func (cp *ControlPlane) Usage(p string) Usage {
	cp.mu.Lock()
	u := cp.usage(p)
	cp.mu.Unlock()
	u.Snapshots = cp.snapshotCount(p)
	u.VolumeMB = cp.volumeMB(p)
	return u
}

// usage counts p's live sandboxes and their memory, the build sandboxes
// of its template builds included. cp.mu is held.
func (cp *ControlPlane) usage(p string) Usage {
	var u Usage
	for _, r := range cp.sandboxes {
		if project.Of(r.Project) == project.Of(p) && !terminal(r.State) && r.State != apiv1.StateStopping {
			u.Sandboxes++
			u.MemoryMB += r.MemoryMB
		}
	}
	for b := range cp.builds {
		if b.project == project.Of(p) {
			u.Sandboxes++
			u.MemoryMB += b.memoryMB
		}
	}
	return u
}

// buildCharge is a template build's sandbox as its project's quota
// counts it: it holds a place and its memory like any sandbox, but has
// no sandbox record.
type buildCharge struct {
	project  string
	memoryMB int
}

// ChargeBuild counts a template build of project p, whose build sandbox
// has memoryMB, as one of p's sandboxes until release is called: a build
// holds as much as a sandbox does (for up to its timeout), so a project
// at its quota cannot build, and a build's place is not free for a
// create. It takes one create from p's create rate too. A refusal is a
// *QuotaError. The charge is this replica's: builds run by the replica
// that admitted them.
func (cp *ControlPlane) ChargeBuild(p string, memoryMB int) (release func(), err error) {
	p = project.Of(p)
	if err := cp.allowCreates(p, 1); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := cp.checkQuota(p, memoryMB); err != nil {
		return nil, fmt.Errorf("build a template: %w", err)
	}
	if cp.builds == nil {
		cp.builds = map[*buildCharge]bool{}
	}
	charge := &buildCharge{project: p, memoryMB: memoryMB}
	cp.builds[charge] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			cp.mu.Lock()
			delete(cp.builds, charge)
			cp.mu.Unlock()
		})
	}, nil
}

// checkQuota refuses one more sandbox of memoryMB in project p when it
// would pass p's sandbox or memory quota. cp.mu is held, so concurrent
// creates cannot both take the last place.
func (cp *ControlPlane) checkQuota(p string, memoryMB int) error {
	if cp.cfg.Quotas == nil {
		return nil
	}
	q, u := cp.cfg.Quotas.Of(p), cp.usage(p)
	switch {
	case q.MaxSandboxes > 0 && u.Sandboxes+1 > q.MaxSandboxes:
		return &QuotaError{Project: project.Of(p), Message: fmt.Sprintf("the project has %d of its %d sandboxes; delete one first", u.Sandboxes, q.MaxSandboxes)}
	case q.MaxMemoryMB > 0 && u.MemoryMB+memoryMB > q.MaxMemoryMB:
		return &QuotaError{Project: project.Of(p), Message: fmt.Sprintf("the project's sandboxes hold %d MiB of its %d MiB of memory; %d MiB more does not fit", u.MemoryMB, q.MaxMemoryMB, memoryMB)}
	}
	return nil
}

// allowCreates takes n creates from project p's create rate.
func (cp *ControlPlane) allowCreates(p string, n int) error {
	if cp.cfg.Quotas == nil {
		return nil
	}
	wait, ok := cp.cfg.Quotas.AllowCreate(p, n)
	if ok {
		return nil
	}
	// Retry-After has whole seconds; round up so a retry then succeeds.
	wait = time.Duration(math.Ceil(wait.Seconds())) * time.Second
	return &QuotaError{Project: project.Of(p), RetryAfter: max(wait, time.Second),
		Message: fmt.Sprintf("at most %g sandbox creates a second", cp.cfg.Quotas.Of(p).CreatesPerSecond)}
}

// checkSnapshotQuota refuses one more snapshot in project p past its quota.
func (cp *ControlPlane) checkSnapshotQuota(p string) error {
	if cp.cfg.Quotas == nil {
		return nil
	}
	q := cp.cfg.Quotas.Of(p)
	if n := cp.snapshotCount(p); q.MaxSnapshots > 0 && n+1 > q.MaxSnapshots {
		return &QuotaError{Project: project.Of(p), Message: fmt.Sprintf("the project has %d of its %d snapshots; delete one first", n, q.MaxSnapshots)}
	}
	return nil
}

// snapshotCount counts project p's stored snapshots.
func (cp *ControlPlane) snapshotCount(p string) int {
	all, err := store.All[Snapshot](cp.cfg.Store, snapshotBucket)
	if err != nil {
		cp.log.Error("count snapshots", "err", err)
	}
	n := 0
	for _, s := range all {
		if project.Of(s.Project) == project.Of(p) {
			n++
		}
	}
	return n
}

// checkVolumeQuota refuses sizeMB more of volumes in project p past its
// quota. The volumes lock is held, so concurrent creates cannot both take
// the last room.
func (cp *ControlPlane) checkVolumeQuota(p string, sizeMB int) error {
	if cp.cfg.Quotas == nil {
		return nil
	}
	q := cp.cfg.Quotas.Of(p)
	if used := cp.volumeMB(p); q.MaxVolumeMB > 0 && used+sizeMB > q.MaxVolumeMB {
		return &QuotaError{Project: project.Of(p), Message: fmt.Sprintf("the project's volumes hold %d MiB of its %d MiB; %d MiB more does not fit", used, q.MaxVolumeMB, sizeMB)}
	}
	return nil
}

// volumeMB sums the sizes of project p's volumes.
func (cp *ControlPlane) volumeMB(p string) int {
	vols, err := cp.Volumes(project.In(p))
	if err != nil {
		cp.log.Error("count volumes", "err", err)
	}
	n := 0
	for _, v := range vols {
		n += v.SizeMB
	}
	return n
}
