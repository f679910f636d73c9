package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
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
//   - starting: the start is run again from scratch; a branch or a start
//     from a snapshot is restored again from its capture if that is whole.
//   - stopping: the stop is finished (and a deleted sandbox forgotten).
//   - a restore that was not recorded (Restoring) is undone first.
//
// An adopted runtime makes the sandbox's suspend image stale: it is
// dropped. Afterwards anything on the node that no sandbox or snapshot owns
// is removed: runtimes, slots, volumes, images, captures, empty image
// directories. On a store other replicas share, only the replica that
// finds no leader (the first of a cluster, or `space serve` on PostgreSQL)
// does this, leaving alone the transitions live replicas run; the others
// only load the records (replicas.go).
func (cp *ControlPlane) Recover(ctx context.Context) error {
	if cp.shared && !cp.recoverShared(ctx) {
		return nil
	}
	all, err := store.All[Sandbox](cp.cfg.Store, sandboxBucket)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if err := cp.convertLegacyImages(all); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	cp.mu.Lock()
	for _, s := range all {
		cp.sandboxes[s.ID] = &record{Sandbox: s}
	}
	cp.mu.Unlock()
	copies := map[Source][]*record{}
	for _, s := range all {
		r, _ := cp.lookup(s.ID)
		if cp.othersTransition(ctx, s) {
			continue
		}
		if err := cp.recoverOne(ctx, r, copies); err != nil {
			cp.log.Error("recover sandbox", "sandbox", s.ID, "state", s.State, "err", err)
			cp.fail(ctx, r, "recovery failed: "+err.Error())
		}
	}
	for src, rs := range copies {
		cp.restartCopies(src, rs)
	}
	if err := cp.sweepImages(ctx); err != nil {
		cp.log.Warn("sweep images", "err", err)
	}
	if err := cp.sweepCaptures(ctx); err != nil {
		cp.log.Warn("sweep captures", "err", err)
	}
	var keep []string
	cp.mu.Lock()
	for id, r := range cp.sandboxes {
		if !terminal(r.State) {
			keep = append(keep, id)
		}
	}
	cp.mu.Unlock()
	return cp.cfg.Node.Sweep(ctx, keep)
}

// recoverOne reconciles one sandbox; a branch or a start from a snapshot
// that must run again is added to copies, keyed by what it restores from.
func (cp *ControlPlane) recoverOne(ctx context.Context, r *record, copies map[Source][]*record) error {
	s := cp.snapshot(r)
	if terminal(s.State) {
		// Released when it ended; what a crash left of it (a slot, a
		// volume) the node's sweep below removes, as it keeps only live
		// sandboxes.
		return nil
	}
	if s.State != apiv1.StateSuspended {
		if err := cp.cfg.Node.Quiesce(ctx, s.ID); err != nil {
			cp.log.Warn("quiesce", "sandbox", s.ID, "err", err)
		}
	}
	if s.Restoring != "" {
		// A restore that was not recorded did not happen: the node puts
		// the old root volume back, and the old memory is its suspend
		// image (or its runtime, if the crash came before that was made).
		if _, err := cp.cfg.Node.RevertRestore(ctx, s.ID); err != nil {
			return err
		}
		if err := cp.update(r, func(s *Sandbox) { s.Restoring = "" }); err != nil {
			return err
		}
		cp.recordEvent(s.ID, Event{Type: "restore", Message: "restore of " + s.Restoring + " interrupted by a server restart; undone"})
	} else if err := cp.cfg.Node.CommitRestore(ctx, s.ID); err != nil {
		// What a recorded restore had not dropped yet.
		cp.log.Warn("drop the volume a restore replaced", "sandbox", s.ID, "err", err)
	}
	switch s.State {
	case apiv1.StateStarting:
		return cp.restart(ctx, r, copies)
	case apiv1.StateStopping:
		if err := cp.stop(ctx, r, s.Reason); err != nil {
			return err
		}
		if s.Reason == "deleted" {
			return cp.forget(s.ID) // the client asked for it to go away
		}
		return nil
	case apiv1.StateSuspended:
		return nil
	case apiv1.StateSuspending:
		if cp.settled(ctx, s) {
			if err := cp.cfg.Node.Halt(ctx, s.ID); err != nil {
				return err
			}
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
		} else if paused, err := cp.cfg.Node.Paused(ctx, s.ID); err != nil {
			return err
		} else if paused {
			// Left frozen by an interrupted pause, suspend or capture.
			if err := cp.cfg.Node.Resume(ctx, s.ID); err != nil {
				return err
			}
		}
		// The slot's rules live in the kernel and survived the restart;
		// applying the stored policy again repairs a change the crash
		// interrupted between persisting and applying it.
		if err := cp.cfg.Node.SetNetwork(ctx, s.ID, s.policy()); err != nil && !errors.Is(err, nodeapi.ErrNoEgress) {
			cp.log.Warn("re-apply network policy", "sandbox", s.ID, "err", err)
		}
		cp.recordEvent(s.ID, Event{Type: "adopted", Message: "re-adopted after server restart"})
		// The runtime that lives on is newer than any suspend image (a
		// resume from it, or a suspend that did not finish): restoring
		// that image later would bring back memory older than the disk.
		if err := cp.dropSuspendImage(ctx, r); err != nil {
			return err
		}
		if s.State != want {
			return cp.setState(r, want, "recovered after a server restart")
		}
		return nil
	}
	// The runtime is gone (host reboot, or it died with the server).
	if s.State != apiv1.StateSuspended && cp.imageComplete(ctx, s.Image) {
		if err := cp.cfg.Node.Halt(ctx, s.ID); err != nil {
			return err
		}
		if s.Restoring != "" {
			// The image is the one the restore made of the sandbox as it
			// was: nothing is lost, so it is not flagged recovered.
			return cp.moveTo(r, apiv1.StateSuspended, "restore of "+s.Restoring+" interrupted by a server restart; suspended as it was before")
		}
		if err := cp.moveTo(r, apiv1.StateSuspended, "the host lost the sandbox; brought back as suspended from its last image"); err != nil {
			return err
		}
		return cp.update(r, func(s *Sandbox) { s.Recovered = "restored from the last suspend image" })
	}
	return cp.reboot(ctx, r)
}

// settled reports whether the suspend a crash interrupted left a whole
// image (the node waits for a checkpoint still running first).
func (cp *ControlPlane) settled(ctx context.Context, s Sandbox) bool {
	if s.Image == "" {
		return false
	}
	ok, err := cp.cfg.Node.SettleCheckpoint(ctx, s.ID, s.Image)
	if err != nil {
		cp.log.Warn("settle checkpoint", "sandbox", s.ID, "err", err)
		return false
	}
	return ok
}

// dropSuspendImage forgets and removes a sandbox's suspend image once it
// runs from something newer. The record is changed first: an image that
// lingers after a crash is swept, one still recorded would be used.
func (cp *ControlPlane) dropSuspendImage(ctx context.Context, r *record) error {
	image := cp.snapshot(r).Image
	if image == "" {
		return nil
	}
	if err := cp.update(r, func(s *Sandbox) { s.Image = "" }); err != nil {
		return err
	}
	if err := cp.removeImage(ctx, image); err != nil {
		cp.log.Warn("remove stale suspend image", "sandbox", r.ID, "err", err)
	}
	return nil
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

// restart runs an interrupted start again from scratch. A copy (a branch,
// a start from a snapshot) whose capture is still whole is queued in copies
// to be restored again; one whose capture is gone never ran, so nothing is
// lost by failing it.
func (cp *ControlPlane) restart(ctx context.Context, r *record, copies map[Source][]*record) error {
	s := cp.snapshot(r)
	if err := cp.cfg.Node.Halt(ctx, s.ID); err != nil {
		return err
	}
	if s.Snapshot == "" && s.BranchOf == "" {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
		if err != nil {
			return err
		}
		if err := cp.cfg.Node.DeleteVolume(ctx, path.Join("sandboxes", s.ID)); err != nil {
			cp.log.Warn("drop the root volume of an interrupted start", "sandbox", s.ID, "err", err)
		}
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			return cp.cfg.Node.Create(ctx, nodeapi.CreateRequest{Spec: cp.createSpec(s, tpl)})
		})
		return nil
	}
	if src := s.Source; src != nil && cp.volumeExists(ctx, src.Volume) && cp.imageComplete(ctx, src.Image) {
		if _, err := cp.findSnapshotKey(src.Snapshot); src.Snapshot == "" || err == nil {
			copies[*src] = append(copies[*src], r)
			return nil
		}
	}
	cp.fail(ctx, r, "start interrupted by a server restart, and what it started from is gone")
	return nil
}

// restartCopies starts again the copies that a crash interrupted, all from
// the same capture, which is then released as after a branch.
func (cp *ControlPlane) restartCopies(src Source, rs []*record) {
	done := func() { cp.dropCapture(src.Volume, src.Image) }
	if src.Snapshot != "" {
		// A snapshot stays (and is held as during the first attempt).
		_, release, err := cp.holdSnapshot(func() (Snapshot, error) { return cp.findSnapshotKey(src.Snapshot) },
			"a start of a new sandbox from it")
		if err != nil {
			for _, r := range rs {
				cp.fail(context.Background(), r, "start interrupted by a server restart; its snapshot is gone")
			}
			return
		}
		done = release
	}
	for _, r := range rs {
		cp.recordEvent(r.ID, Event{Type: "state", Message: "start interrupted by a server restart; restoring again"})
	}
	cp.startCopies(rs, src, done)
}

// findSnapshotKey finds a snapshot by its key, "<sandbox>/<name>".
func (cp *ControlPlane) findSnapshotKey(key string) (Snapshot, error) {
	sbx, name, _ := strings.Cut(key, "/")
	return cp.findSnapshot(sbx, name)
}

// reboot starts a sandbox again on its root volume after its memory was
// lost, and flags it.
func (cp *ControlPlane) reboot(ctx context.Context, r *record) error {
	s := cp.snapshot(r)
	tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
	if err != nil {
		return err
	}
	if !cp.volumeExists(ctx, path.Join("sandboxes", s.ID)) {
		return fmt.Errorf("root volume of %s is gone", s.ID)
	}
	if err := cp.cfg.Node.Halt(ctx, s.ID); err != nil {
		return err
	}
	tpl.Start, tpl.Ready = "", "" // the filesystem already holds what start made
	if err := cp.moveTo(r, apiv1.StateResuming, "host lost the sandbox's memory; booting its disk again"); err != nil {
		return err
	}
	if err := cp.cfg.Node.BootFromDisk(ctx, cp.createSpec(s, tpl)); err != nil {
		return err
	}
	if err := cp.update(r, func(s *Sandbox) {
		s.Recovered = "rebooted from its disk after the host lost it: files kept, processes and memory lost"
	}); err != nil {
		return err
	}
	return cp.setState(r, apiv1.StateRunning, "recovered from its last durable state")
}

// sweepImages deletes the node's checkpoint images that no sandbox or
// snapshot owns: what a crash left of a suspend, capture or branch (the
// node removes the directories they leave empty).
func (cp *ControlPlane) sweepImages(ctx context.Context) error {
	images, err := cp.cfg.Node.Images(ctx)
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		if r.Image != "" {
			owned[r.Image] = true
		}
		if src := startingFrom(r); src != nil {
			owned[src.Image] = true
		}
	}
	cp.mu.Unlock()
	snaps, err := cp.Snapshots("")
	if err != nil {
		return err
	}
	for _, s := range snaps {
		owned[s.Image] = true
	}
	var errs []error
	for _, image := range images {
		if owned[image] {
			continue
		}
		cp.log.Info("removing orphaned image", "image", image)
		if err := cp.cfg.Node.DeleteImage(ctx, image); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// volumeExists reports whether the node holds a volume; a node that
// cannot tell is taken to hold none.
func (cp *ControlPlane) volumeExists(ctx context.Context, name string) bool {
	ok, err := cp.cfg.Node.VolumeExists(ctx, name)
	if err != nil {
		cp.log.Warn("look up volume", "volume", name, "err", err)
	}
	return ok
}

// startingFrom is the capture a sandbox that is still starting restores
// from, if any.
func startingFrom(r *record) *Source {
	if r.State == apiv1.StateStarting {
		return r.Source
	}
	return nil
}

// sweepCaptures removes captured volumes (snapshots/<sandbox>/<x>) that no
// snapshot owns and no start restores from: the capture of a snapshot or a
// branch that a crash interrupted. Directories left empty go too.
func (cp *ControlPlane) sweepCaptures(ctx context.Context) error {
	owned := cp.snapshotVolumes()
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		if src := startingFrom(r); src != nil {
			owned[src.Volume] = true
		}
	}
	cp.mu.Unlock()
	dirs, err := cp.cfg.Node.Volumes(ctx, "snapshots")
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		vols, err := cp.cfg.Node.Volumes(ctx, dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		kept := 0
		for _, v := range vols {
			if owned[v] {
				kept++
				continue
			}
			cp.log.Info("removing orphaned capture", "volume", v)
			if err := cp.cfg.Node.DeleteVolume(ctx, v); err != nil {
				errs = append(errs, err)
			}
		}
		if kept == 0 {
			if err := cp.cfg.Node.DeleteVolume(ctx, dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// dropCapture removes a branch's capture once every branch restored from it.
func (cp *ControlPlane) dropCapture(volume, image string) {
	ctx := context.Background()
	if err := cp.cfg.Node.DeleteVolume(ctx, volume); err != nil {
		cp.log.Warn("drop branch capture", "volume", volume, "err", err)
	}
	if err := cp.removeImage(ctx, image); err != nil {
		cp.log.Warn("drop branch capture image", "image", image, "err", err)
	}
}
