package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// SuspendOptions says what a suspend keeps.
type SuspendOptions struct {
	// DropMemory keeps only the disk (E2B's pause with keepMemory false):
	// the runtime stops without a checkpoint, nothing of its memory is
	// written, and the resume boots the root volume afresh, with the
	// template's start command, as a new boot. Running processes and the
	// sessions the node followed are gone after that resume.
	DropMemory bool
}

// syncTimeout bounds the flush of a sandbox's files before a suspend that
// drops its memory; a sandbox that does not sync in time is halted anyway
// (what it had written through already is on the volume).
const syncTimeout = 30 * time.Second

// SuspendWith suspends a sandbox as opts say; without options it is
// Suspend.
func (cp *ControlPlane) SuspendWith(ctx context.Context, id string, opts SuspendOptions) (Sandbox, error) {
	if !opts.DropMemory {
		return cp.Suspend(ctx, id)
	}
	return cp.locked(id, func(r *record) error { return cp.suspendDisk(ctx, r, "") })
}

// suspendAsConfigured is the timeout's and the idle check's suspend: it
// keeps memory unless the sandbox was created with keep_memory false, or
// its runtime cannot save it.
func (cp *ControlPlane) suspendAsConfigured(ctx context.Context, r *record, reason string) error {
	if keep := cp.snapshot(r).Lifecycle.KeepMemory; keep != nil && !*keep {
		return cp.suspendDisk(ctx, r, reason)
	}
	err := cp.suspend(ctx, r, reason)
	if errors.Is(err, nodeapi.ErrNoCheckpoint) {
		// Its runtime cannot save its memory as it runs now (a microVM
		// with volumes mounted refuses before it stops anything): an
		// automatic suspend still frees what the sandbox holds, as one
		// that drops memory, rather than fail again at every check.
		return cp.suspendDisk(ctx, r, reason+" (its memory could not be saved)")
	}
	return err
}

// suspendDisk is a suspend that drops memory, with r.lock held. The
// sandbox's writes are flushed from inside first (its kernel caches file
// data that a stopped runtime would lose), then the runtime stops and the
// root volume stays. A crash before the state is recorded leaves it
// suspending without an image: recovery adopts it if it still runs, and
// boots its disk if not, as after any lost runtime.
func (cp *ControlPlane) suspendDisk(ctx context.Context, r *record, reason string) error {
	if err := cp.require(r, "suspend", apiv1.StateRunning, apiv1.StatePaused); err != nil {
		return err
	}
	n, err := cp.nodeFor(r)
	if err != nil {
		return err
	}
	if cp.snapshot(r).State == apiv1.StatePaused {
		// A frozen sandbox cannot flush its files.
		if err := cp.step(r, apiv1.StateResuming, apiv1.StateRunning, "", func() error { return n.Resume(ctx, r.ID) }); err != nil {
			return fmt.Errorf("unfreeze %s to flush its disk: %w", r.ID, err)
		}
	}
	if reason == "" {
		reason = "memory dropped"
	} else {
		reason += "; memory dropped"
	}
	return cp.step(r, apiv1.StateSuspending, apiv1.StateSuspended, reason+": the resume boots the disk afresh", func() error {
		cp.syncDisk(ctx, n, r.ID)
		return n.Halt(ctx, r.ID)
	}, func(s *Sandbox) {
		now := time.Now().UTC()
		s.SuspendedAt, s.DiskOnly, s.Image = &now, true, ""
	})
}

// syncDisk asks the sandbox to write its cached file data to its volume.
// It is best effort: a template without sync, or a sandbox that does not
// answer, is halted with what it wrote through already.
func (cp *ControlPlane) syncDisk(ctx context.Context, n Node, id string) {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	sb, err := n.Sandbox(ctx, id)
	if err == nil {
		var res *nodeapi.ExecResult
		res, err = sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"sync"}, User: "root", Timeout: syncTimeout})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("sync exited %d: %s", res.ExitCode, res.Stderr)
		}
	}
	if err != nil {
		cp.log.Warn("flush the disk of a sandbox suspended without memory", "sandbox", id, "err", err)
	}
}

// resumeFromDisk boots a sandbox suspended without memory on its root
// volume, with r.lock held: a fresh boot (its agent, a new kernel boot id,
// the template's start command and ready check), the files as they were.
func (cp *ControlPlane) resumeFromDisk(ctx context.Context, r *record, n Node) error {
	s := cp.snapshot(r)
	tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
	if err != nil {
		return fmt.Errorf("resume %s from its disk: %w", s.ID, err)
	}
	cp.touch(r.ID)
	return cp.step(r, apiv1.StateResuming, apiv1.StateRunning, "booted afresh from its disk", func() error {
		return n.BootFromDisk(ctx, cp.createSpec(s, tpl))
	}, func(s *Sandbox) {
		s.ExpiresAt = time.Now().UTC().Add(time.Duration(s.TimeoutS) * time.Second)
		// A memory image left by a suspend that kept memory describes the
		// past once the disk booted (ResumeFromDisk).
		s.DiskOnly, s.Image = false, ""
	})
}

// ResumeFromDisk resumes a suspended sandbox by booting its disk afresh,
// whether or not its suspend kept memory (E2B's connect with onResume
// 'reboot', the way out of a memory image that wedges the guest): a new
// boot, the template's start command, the files as the suspend left them,
// no processes. A frozen sandbox still holds its memory in its runtime and
// is simply thawed.
func (cp *ControlPlane) ResumeFromDisk(ctx context.Context, id string) (Sandbox, error) {
	return cp.locked(id, func(r *record) error {
		s := cp.snapshot(r)
		if s.State != apiv1.StateSuspended {
			return cp.resume(ctx, r)
		}
		n, err := cp.nodeOf(s)
		if err != nil {
			return err
		}
		if err := cp.resumeFromDisk(ctx, r, n); err != nil {
			return err
		}
		if s.Image != "" {
			if err := cp.removeImage(ctx, n, s.Image); err != nil {
				cp.log.Warn("remove memory image a reboot left unused", "sandbox", id, "err", err)
			}
		}
		return nil
	})
}
