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

// Recover loads the persisted sandboxes after a (re)start and, when the
// control plane has a node in its process (serve's, Config.LocalNode),
// reconciles that node (ReconcileNode); other nodes are reconciled as
// they join (Run).
// On a store other replicas share, only the replica that finds no leader
// (the first of a cluster, or `space serve` on PostgreSQL) goes on past
// loading the records (replicas.go).
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
		cp.sandboxes[s.ID] = cp.stored(s)
	}
	cp.mu.Unlock()
	id := cp.cfg.LocalNode
	if id == "" {
		return nil
	}
	cp.fleet.join(id)
	if err := cp.ReconcileNode(ctx, id); err != nil {
		return err
	}
	cp.fleet.markReconciled(id)
	return nil
}

// ReconcileNode reconciles the sandboxes of node id with what the node
// still has, finishing or rolling back whatever
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
// dropped. Afterwards anything on the node that none of its sandboxes or
// snapshots owns is removed: runtimes, slots, volumes, images, captures,
// empty image directories. Only node id's records are read or changed; a
// sandbox whose operation is under way (its lock held) is left to that
// operation.
//
// On a store other replicas share, whichever replica sees the node join
// reconciles it, and its cache may lag what the others just wrote: the
// records are read from the store first, and again just before the sweep,
// so that the sweep keeps a sandbox another replica created meanwhile. A
// start on this replica whose record came after the last read waits for
// the sweep to end (nodeSweep). A store that cannot be read leaves the
// node unswept.
func (cp *ControlPlane) ReconcileNode(ctx context.Context, id string) error {
	n, err := cp.node(id, "")
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if err := cp.freshen(); err != nil {
		return fmt.Errorf("reconcile node %s: %w", id, err)
	}
	cp.mu.Lock()
	var rs []*record
	for _, r := range cp.sandboxes {
		if cp.nodeID(r.Node) == id {
			rs = append(rs, r)
		}
	}
	cp.mu.Unlock()
	rec := &reconcile{copies: map[Source][]*record{}, starts: map[*record]nodeapi.TemplateSpec{}}
	for _, r := range rs {
		if !r.lock.TryLock() {
			continue
		}
		if cp.othersTransition(r) {
			r.lock.Unlock()
			continue
		}
		if err := cp.recoverOne(ctx, n, r, rec); err != nil {
			cp.log.Error("recover sandbox", "sandbox", r.ID, "node", id, "err", err)
			cp.fail(ctx, r, "recovery failed: "+err.Error())
		}
		r.lock.Unlock()
	}
	// A drain a crash interrupted: finished or rolled back (drain.go).
	cp.settleMovesOf(ctx, id)
	for r, tpl := range rec.starts {
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			return n.Create(ctx, nodeapi.CreateRequest{Spec: cp.createSpec(s, tpl)})
		})
	}
	for src, rs := range rec.copies {
		cp.restartCopies(src, rs)
	}
	if err := cp.freshen(); err != nil {
		return fmt.Errorf("reconcile node %s: sweep: %w", id, err)
	}
	if err := cp.sweepImages(ctx, n, id); err != nil {
		cp.log.Warn("sweep images", "node", id, "err", err)
	}
	if err := cp.sweepCaptures(ctx, n, id); err != nil {
		cp.log.Warn("sweep captures", "node", id, "err", err)
	}
	// No start on the node from here until its sweep returns (nodeSweep).
	sweep := cp.nodeSweep(id)
	sweep.Lock()
	defer sweep.Unlock()
	var keep []string
	cp.mu.Lock()
	for sid, r := range cp.sandboxes {
		if !terminal(r.State) && cp.nodeID(r.Node) == id {
			keep = append(keep, sid)
		}
	}
	cp.mu.Unlock()
	cp.movedHere(id, &keep, nil, nil)
	return n.Sweep(ctx, keep)
}

// othersTransition reports whether r (its lock held) is in a transition
// that another replica owns. That replica finishes it (a start whose
// record it wrote but whose node call has not begun yet), or, if it died,
// the leader does (adoptOrphans, which claims it first): a reconcile on
// this replica must not run it a second time.
func (cp *ControlPlane) othersTransition(r *record) bool {
	if !cp.shared {
		return false
	}
	s := cp.snapshot(r)
	return transitional(s.State) && s.Owner != "" && s.Owner != cp.replicaID
}

// freshen brings the cache up to date with a store other replicas write
// (a no-op on one they do not).
func (cp *ControlPlane) freshen() error {
	if !cp.shared {
		return nil
	}
	return cp.resync()
}

// reconcile is what a reconcile of a node starts again once every record
// was looked at (their locks released): starts from a template, and
// copies (branches, starts from a snapshot) keyed by what they restore
// from.
type reconcile struct {
	copies map[Source][]*record
	starts map[*record]nodeapi.TemplateSpec
}

// recoverOne reconciles one sandbox of node n with r.lock held: the node
// settles it from what the record says (nodeapi.Reconcile, one call),
// and the record follows the outcome.
func (cp *ControlPlane) recoverOne(ctx context.Context, n Node, r *record, rec *reconcile) error {
	s := cp.snapshot(r)
	if terminal(s.State) {
		// Released when it ended; what a crash left of it (a slot, a
		// volume) the node's sweep below removes, as it keeps only live
		// sandboxes.
		return nil
	}
	req := nodeapi.ReconcileRequest{ID: s.ID, AccessToken: s.AccessToken, State: s.State, Restoring: s.Restoring != ""}
	if s.State == apiv1.StateSuspending {
		req.Image = s.Image
	}
	res, err := n.Reconcile(ctx, req)
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		cp.log.Warn("reconcile", "sandbox", s.ID, "warning", w)
	}
	if s.Restoring != "" {
		// A restore that was not recorded did not happen: the node put
		// the old root volume back, and the old memory is its suspend
		// image (or its runtime, if the crash came before that was made).
		// A crash before this update leaves nothing to undo the next time.
		if err := cp.update(r, func(s *Sandbox) { s.Restoring = "" }); err != nil {
			return err
		}
		cp.recordEvent(s.ID, Event{Type: "restore", Message: "restore of " + s.Restoring + " interrupted by a server restart; undone"})
	}
	switch res.Outcome {
	case nodeapi.ReconcileUntouched:
		switch s.State {
		case apiv1.StateStarting:
			return cp.restart(ctx, n, r, rec)
		case apiv1.StateStopping:
			if err := cp.stop(ctx, r, s.Reason); err != nil {
				return err
			}
			if s.Reason == "deleted" {
				return cp.forget(s.ID) // the client asked for it to go away
			}
		}
		return nil // suspended
	case nodeapi.ReconcileSuspended:
		return cp.setState(r, apiv1.StateSuspended, "suspend finished after a server restart",
			func(s *Sandbox) { now := time.Now().UTC(); s.SuspendedAt = &now })
	case nodeapi.ReconcileRunning, nodeapi.ReconcilePaused:
		return cp.adopted(ctx, n, r, s, res.Outcome)
	case nodeapi.ReconcileGone:
		return cp.recoverLost(ctx, n, r, s)
	}
	return fmt.Errorf("reconcile of %s: the node answered an unknown outcome %q", s.ID, res.Outcome)
}

// adopted records a sandbox whose runtime the node adopted (running, or
// paused as recorded) after a crash; s is its record before the reconcile.
func (cp *ControlPlane) adopted(ctx context.Context, n Node, r *record, s Sandbox, outcome nodeapi.ReconcileOutcome) error {
	want := apiv1.StateRunning
	if outcome == nodeapi.ReconcilePaused {
		want = apiv1.StatePaused
	}
	// The slot's rules live in the kernel and survived the restart;
	// applying the stored policy again repairs a change the crash
	// interrupted between persisting and applying it.
	if err := n.SetNetwork(ctx, s.ID, s.policy()); err != nil && !errors.Is(err, nodeapi.ErrNoEgress) {
		cp.log.Warn("re-apply network policy", "sandbox", s.ID, "err", err)
	}
	cp.recordEvent(s.ID, Event{Type: "adopted", Message: "re-adopted after server restart"})
	// The runtime that lives on is newer than any suspend image (a
	// resume from it, or a suspend that did not finish): restoring
	// that image later would bring back memory older than the disk.
	if err := cp.dropSuspendImage(ctx, n, r); err != nil {
		return err
	}
	if s.State != want {
		return cp.setState(r, want, "recovered after a server restart")
	}
	return nil
}

// recoverLost brings back a sandbox whose runtime is gone (host reboot,
// or it died with the server) from its last durable state: a whole
// suspend image if it has one, else its root volume, booted again. s is
// its record before the reconcile (which may have cleared Restoring).
func (cp *ControlPlane) recoverLost(ctx context.Context, n Node, r *record, s Sandbox) error {
	if s.State == apiv1.StateSuspended || !cp.imageComplete(ctx, n, s.Image) {
		return cp.reboot(ctx, n, r)
	}
	if err := n.Halt(ctx, s.ID); err != nil {
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

// dropSuspendImage forgets and removes a sandbox's suspend image once it
// runs from something newer. The record is changed first: an image that
// lingers after a crash is swept, one still recorded would be used.
func (cp *ControlPlane) dropSuspendImage(ctx context.Context, n Node, r *record) error {
	image := cp.snapshot(r).Image
	if image == "" {
		return nil
	}
	if err := cp.update(r, func(s *Sandbox) { s.Image = "" }); err != nil {
		return err
	}
	if err := cp.removeImage(ctx, n, image); err != nil {
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

// fail releases a sandbox's node resources and records it failed. A node
// that does not answer is swept of them when it comes back.
func (cp *ControlPlane) fail(ctx context.Context, r *record, reason string) {
	if n, err := cp.nodeFor(r); err != nil {
		cp.log.Error("release failed sandbox", "sandbox", r.ID, "err", err)
	} else if err := n.Destroy(ctx, r.ID); err != nil {
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
func (cp *ControlPlane) restart(ctx context.Context, n Node, r *record, rec *reconcile) error {
	s := cp.snapshot(r)
	if err := n.Halt(ctx, s.ID); err != nil {
		return err
	}
	if s.Snapshot == "" && s.BranchOf == "" {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
		if err != nil {
			return err
		}
		if err := n.DeleteVolume(ctx, path.Join("sandboxes", s.ID)); err != nil {
			cp.log.Warn("drop the root volume of an interrupted start", "sandbox", s.ID, "err", err)
		}
		rec.starts[r] = tpl
		return nil
	}
	if src := s.Source; src != nil && cp.volumeExists(ctx, n, src.Volume) && cp.imageComplete(ctx, n, src.Image) {
		if _, err := cp.findSnapshotKey(src.Snapshot); src.Snapshot == "" || err == nil {
			rec.copies[*src] = append(rec.copies[*src], r)
			return nil
		}
	}
	cp.fail(ctx, r, "start interrupted by a server restart, and what it started from is gone")
	return nil
}

// restartCopies starts again the copies that a crash interrupted, all from
// the same capture, which is then released as after a branch.
func (cp *ControlPlane) restartCopies(src Source, rs []*record) {
	done := func() {
		if n, err := cp.node(src.Node, ""); err == nil {
			cp.dropCapture(n, src.Volume, src.Image)
		}
	}
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
func (cp *ControlPlane) reboot(ctx context.Context, n Node, r *record) error {
	s := cp.snapshot(r)
	tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, s.TemplateID)
	if err != nil {
		return err
	}
	if !cp.volumeExists(ctx, n, path.Join("sandboxes", s.ID)) {
		return fmt.Errorf("root volume of %s is gone", s.ID)
	}
	if err := n.Halt(ctx, s.ID); err != nil {
		return err
	}
	tpl.Start, tpl.Ready = "", "" // the filesystem already holds what start made
	if err := cp.moveTo(r, apiv1.StateResuming, "host lost the sandbox's memory; booting its disk again"); err != nil {
		return err
	}
	if err := n.BootFromDisk(ctx, cp.createSpec(s, tpl)); err != nil {
		return err
	}
	if err := cp.update(r, func(s *Sandbox) {
		s.Recovered = "rebooted from its disk after the host lost it: files kept, processes and memory lost"
	}); err != nil {
		return err
	}
	return cp.setState(r, apiv1.StateRunning, "recovered from its last durable state")
}

// sweepImages deletes the checkpoint images of node n (id) that none of its
// sandboxes or snapshots owns: what a crash left of a suspend, capture or
// branch (the node removes the directories they leave empty).
func (cp *ControlPlane) sweepImages(ctx context.Context, n Node, id string) error {
	images, err := n.Images(ctx)
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		if cp.nodeID(r.Node) != id {
			continue
		}
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
		if cp.nodeID(s.Node) == id {
			owned[s.Image] = true
		}
	}
	cp.movedHere(id, nil, owned, nil)
	var errs []error
	for _, image := range images {
		if owned[image] {
			continue
		}
		cp.log.Info("removing orphaned image", "image", image)
		if err := n.DeleteImage(ctx, image); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// volumeExists reports whether node n holds a volume; a node that cannot
// tell is taken to hold none.
func (cp *ControlPlane) volumeExists(ctx context.Context, n Node, name string) bool {
	ok, err := n.VolumeExists(ctx, name)
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
func (cp *ControlPlane) sweepCaptures(ctx context.Context, n Node, id string) error {
	owned := cp.snapshotVolumes(id)
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		if src := startingFrom(r); src != nil && cp.nodeID(r.Node) == id {
			owned[src.Volume] = true
		}
	}
	cp.mu.Unlock()
	cp.movedHere(id, nil, nil, owned)
	dirs, err := n.Volumes(ctx, "snapshots")
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		vols, err := n.Volumes(ctx, dir)
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
			if err := n.DeleteVolume(ctx, v); err != nil {
				errs = append(errs, err)
			}
		}
		if kept == 0 {
			if err := n.DeleteVolume(ctx, dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// dropCapture removes a branch's capture on n once every branch restored
// from it.
func (cp *ControlPlane) dropCapture(n Node, volume, image string) {
	ctx := context.Background()
	if err := n.DeleteVolume(ctx, volume); err != nil {
		cp.log.Warn("drop branch capture", "volume", volume, "err", err)
	}
	if err := cp.removeImage(ctx, n, image); err != nil {
		cp.log.Warn("drop branch capture image", "image", image, "err", err)
	}
}
