package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// Recover loads the persisted sandboxes after a (re)start and reconciles
// each with what the node still has, finishing or rolling back whatever
// transition a crash interrupted:
//
//   - running/pausing/resuming/snapshotting: a runtime that survived is
//     adopted (resumed if it was left frozen mid-step). Without one, the
//     sandbox comes back from its last durable state: a complete suspend
//     image if there is one, else its root volume, booted again, with
//     "recovered" saying that processes were lost.
//   - suspending: a complete image finishes the suspend; otherwise the
//     sandbox is treated as running (above).
//   - suspended, paused: stay so (a paused sandbox whose runtime is gone is
//     recovered like a running one).
//   - starting: the start is run again from scratch.
//   - stopping: the stop is finished.
//
// Afterwards anything on the node that no sandbox or snapshot owns is removed.
func (cp *ControlPlane) Recover(ctx context.Context) error {
	all, err := store.All[Sandbox](cp.cfg.Store, sandboxBucket)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	cp.mu.Lock()
	for _, s := range all {
		cp.sandboxes[s.ID] = &record{Sandbox: s}
	}
	cp.mu.Unlock()
	for _, s := range all {
		r, _ := cp.lookup(s.ID)
		if err := cp.recoverOne(ctx, r); err != nil {
			cp.log.Error("recover sandbox", "sandbox", s.ID, "state", s.State, "err", err)
			cp.fail(ctx, r, "recovery failed: "+err.Error())
		}
	}
	cp.sweepImages()
	return cp.cfg.Node.Sweep(ctx, func(id string) bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		r, ok := cp.sandboxes[id]
		return ok && !terminal(r.State)
	})
}

func (cp *ControlPlane) recoverOne(ctx context.Context, r *record) error {
	s := cp.snapshot(r)
	if s.State != apiv1.StateSuspended {
		cp.cfg.Node.Quiesce(ctx, s.ID)
	}
	switch s.State {
	case apiv1.StateStarting:
		return cp.restart(ctx, r)
	case apiv1.StateStopping:
		return cp.stop(ctx, r, s.Reason)
	case apiv1.StateSuspended:
		return nil
	case apiv1.StateSuspending:
		if s.ImageDir != "" && cp.cfg.Node.SettleCheckpoint(ctx, s.ID, s.ImageDir) {
			cp.cfg.Node.Halt(ctx, s.ID)
			return cp.setState(r, apiv1.StateSuspended, "suspend finished after a server restart",
				func(s *Sandbox) { now := time.Now().UTC(); s.SuspendedAt = &now })
		}
	}
	// running, paused, pausing, resuming, snapshotting, or a torn suspend.
	alive, err := cp.cfg.Node.Adopt(ctx, s.ID, s.AccessToken)
	if err != nil {
		return err
	}
	if alive {
		want := apiv1.StateRunning
		if s.State == apiv1.StatePaused {
			want = apiv1.StatePaused
		} else if cp.cfg.Node.Paused(ctx, s.ID) {
			// Left frozen by an interrupted pause, suspend or capture.
			if err := cp.cfg.Node.Resume(ctx, s.ID); err != nil {
				return err
			}
		}
		// The slot's rules live in the kernel and survived the restart;
		// applying the stored policy again repairs a change the crash
		// interrupted between persisting and applying it.
		if err := cp.cfg.Node.SetNetwork(ctx, s.ID, s.policy()); err != nil && !errors.Is(err, node.ErrNoEgress) {
			cp.log.Warn("re-apply network policy", "sandbox", s.ID, "err", err)
		}
		cp.recordEvent(s.ID, Event{Type: "adopted", Message: "re-adopted after server restart"})
		if s.State != want {
			return cp.setState(r, want, "recovered after a server restart")
		}
		return nil
	}
	// The runtime is gone (host reboot, or it died with the server).
	if s.ImageDir != "" && node.ImageComplete(s.ImageDir) && s.State != apiv1.StateSuspended {
		cp.cfg.Node.Halt(ctx, s.ID)
		if err := cp.moveTo(r, apiv1.StateSuspended, "the host lost the sandbox; brought back as suspended from its last image"); err != nil {
			return err
		}
		return cp.update(r, func(s *Sandbox) { s.Recovered = "restored from the last suspend image" })
	}
	return cp.reboot(ctx, r)
}

// moveTo walks a recovered sandbox to state to. A crash can leave it in a
// transient state with no direct edge to where recovery takes it; the walk
// then passes through running, which every transient state may return to.
func (cp *ControlPlane) moveTo(r *record, to, reason string) error {
	from := cp.snapshot(r).State
	if from == to {
		return nil
	}
	if !canMove(from, to) && canMove(from, apiv1.StateRunning) {
		if err := cp.setState(r, apiv1.StateRunning, "interrupted by a server restart"); err != nil {
			return err
		}
		from = apiv1.StateRunning
	}
	if to == apiv1.StateSuspended && !canMove(from, to) {
		if err := cp.setState(r, apiv1.StateSuspending, reason); err != nil {
			return err
		}
	}
	return cp.setState(r, to, reason)
}

// fail releases a sandbox's node resources and records it failed.
func (cp *ControlPlane) fail(ctx context.Context, r *record, reason string) {
	if err := cp.cfg.Node.Destroy(ctx, r.ID); err != nil {
		cp.log.Error("release failed sandbox", "sandbox", r.ID, "err", err)
	}
	if err := cp.setState(r, apiv1.StateFailed, reason); err != nil {
		cp.log.Error("record failure", "sandbox", r.ID, "err", err)
	}
}

// restart runs an interrupted start again from scratch.
func (cp *ControlPlane) restart(ctx context.Context, r *record) error {
	s := cp.snapshot(r)
	cp.cfg.Node.Halt(ctx, s.ID)
	if s.Snapshot == "" && s.BranchOf == "" {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
		if err != nil {
			return err
		}
		_ = cp.cfg.Node.DeleteVolume(path.Join("sandboxes", s.ID))
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			return cp.cfg.Node.Create(ctx, node.CreateSpec{
				ID: s.ID, Template: tpl, Env: s.Env, AccessToken: s.AccessToken, DiskMB: s.DiskMB, Limits: cp.limits(s),
				Network: s.policy(),
			})
		})
		return nil
	}
	// A copy whose capture may be gone: it never ran, so nothing is lost
	// by failing it.
	cp.fail(ctx, r, "start interrupted by a server restart")
	return nil
}

// reboot starts a sandbox again on its root volume after its memory was
// lost, and flags it.
func (cp *ControlPlane) reboot(ctx context.Context, r *record) error {
	s := cp.snapshot(r)
	tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
	if err != nil {
		return err
	}
	if !cp.cfg.Node.VolumeExists(path.Join("sandboxes", s.ID)) {
		return fmt.Errorf("root volume of %s is gone", s.ID)
	}
	cp.cfg.Node.Halt(ctx, s.ID)
	tpl.Start, tpl.Ready = "", "" // the filesystem already holds what start made
	if err := cp.moveTo(r, apiv1.StateResuming, "host lost the sandbox's memory; booting its disk again"); err != nil {
		return err
	}
	err = cp.cfg.Node.BootFromDisk(ctx, node.CreateSpec{
		ID: s.ID, Template: tpl, Env: s.Env, AccessToken: s.AccessToken, DiskMB: s.DiskMB, Limits: cp.limits(s),
		Network: s.policy(),
	})
	if err != nil {
		return err
	}
	if err := cp.update(r, func(s *Sandbox) {
		s.Recovered = "rebooted from its disk after the host lost it: files kept, processes and memory lost"
	}); err != nil {
		return err
	}
	return cp.setState(r, apiv1.StateRunning, "recovered from its last durable state")
}

// sweepImages removes checkpoint images that no sandbox or snapshot owns.
func (cp *ControlPlane) sweepImages() {
	if cp.cfg.ImagesDir == "" {
		return
	}
	owned := map[string]bool{}
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		if r.ImageDir != "" {
			owned[r.ImageDir] = true
		}
	}
	cp.mu.Unlock()
	snaps, _ := cp.Snapshots("")
	for _, s := range snaps {
		owned[s.ImageDir] = true
	}
	dirs, _ := filepath.Glob(filepath.Join(cp.cfg.ImagesDir, "*", "*"))
	more, _ := filepath.Glob(filepath.Join(cp.cfg.ImagesDir, "*", "*", "*"))
	for _, d := range append(dirs, more...) {
		base := filepath.Base(filepath.Dir(d))
		if strings.HasSuffix(d, ".partial") {
			_ = os.RemoveAll(d) // a checkpoint a crash interrupted
			continue
		}
		if base == "snapshots" || base == "branches" || filepath.Base(d) == "suspend" {
			if !owned[d] {
				_ = os.RemoveAll(d)
			}
		}
	}
}
