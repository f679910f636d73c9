package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// A drain moves every sandbox of a node to other nodes, one at a time and
// each under its lock: a running or paused sandbox is suspended, its root
// volume, suspend image (which carries its sessions' journals) and
// snapshots are streamed from the node to the target, the records are
// switched to the target, the copies on the node are deleted, and the
// sandbox is resumed on the target (a paused one paused again); a
// suspended one stays suspended. Ids, tokens, metadata and expiry do not
// change.
//
// A move is recorded (moveBucket) before anything is copied, so that a
// control plane that restarts finishes or rolls back what an earlier one
// left (settleMove): a move whose sandbox is still suspended as the move
// left it goes on (a copy already on the target is kept: volumes and
// images appear whole or not at all), anything else is rolled back. The
// records switch only once everything arrived, and the node's copies are
// deleted only after the switch, so at every moment one node holds the
// whole sandbox and the records name it.
const moveBucket = "sandbox_moves"

// move is one sandbox's move in progress.
type move struct {
	Sandbox string `json:"sandbox"`
	From    string `json:"from"`
	To      string `json:"to"`
	// Was is the sandbox's state before the move: a running or paused
	// sandbox is brought back to it wherever the move ends.
	Was string `json:"was"`
	// Suspended is the SuspendedAt of the suspend the copies are of, set
	// once the sandbox is suspended; Image its suspend image.
	Suspended *time.Time `json:"suspended,omitempty"`
	Image     string     `json:"image,omitempty"`
	DiskMB    int        `json:"disk_mb"`
	// ExpiresAt and SuspendedAt are the sandbox's before the move: the
	// suspend and resume of a move do not count as the client's.
	ExpiresAt   time.Time  `json:"expires_at"`
	SuspendedAt *time.Time `json:"suspended_at,omitempty"`
	// Snapshots move along with the sandbox.
	Snapshots []movedSnapshot `json:"snapshots,omitempty"`
}

// movedSnapshot is a snapshot a move carries, by key, with its data.
type movedSnapshot struct {
	Key    string `json:"key"`
	Volume string `json:"volume"`
	Image  string `json:"image,omitempty"`
}

func rootVolume(id string) string { return path.Join("sandboxes", id) }

// errBusy: a sandbox cannot move yet (one of its snapshots is in use);
// the drain tries it again later.
var errBusy = errors.New("busy")

// DrainError says which sandboxes a drain could not move; they stay on
// the node, as they were.
type DrainError struct {
	Node   string
	Moved  int
	Failed map[string]error // by sandbox id ("snapshot <key>" for snapshots)
}

func (e *DrainError) Error() string {
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range e.Failed {
			if !yield(id) {
				return
			}
		}
	})
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s: %v", id, e.Failed[id]))
	}
	return fmt.Sprintf("drain of node %s: moved %d, %d could not be moved and stay on it (%s)",
		e.Node, e.Moved, len(ids), strings.Join(parts, "; "))
}

// drainRetries bounds how often a drain comes back to a busy sandbox, and
// drainRetryDelay is how long it waits between rounds.
const (
	drainRetries    = 30
	drainRetryDelay = time.Second
)

// DrainNode moves every sandbox of node id that has not ended, and every
// snapshot it holds, to other nodes (see moveBucket for how). The node
// should not take new sandboxes meanwhile (the registry's draining state
// makes it unschedulable, so placement never picks it). A sandbox that
// cannot move stays on the node as it was (running again if it was) and
// the drain goes on with the others; the error is a *DrainError naming
// them. A second drain of the node finishes what an interrupted one left.
func (cp *ControlPlane) DrainNode(ctx context.Context, id string) error {
	if _, err := cp.node(id, ""); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	cp.emptyPools(ctx, id)
	derr := &DrainError{Node: id, Failed: map[string]error{}}
	tried := map[string]int{}
	for ctx.Err() == nil {
		// Another round while a sandbox was busy, or one arrived that was
		// not tried (a start from a snapshot on the node runs there).
		again := false
		for _, r := range cp.recordsOn(id) {
			if _, failed := derr.Failed[r.ID]; failed {
				continue
			}
			tried[r.ID]++
			moved, err := cp.drainOne(ctx, r, id)
			switch {
			case errors.Is(err, errBusy) && tried[r.ID] <= drainRetries:
				again = true
			case err != nil:
				derr.Failed[r.ID] = err
				cp.log.Warn("drain: sandbox not moved", "sandbox", r.ID, "node", id, "err", err)
				cp.recordEvent(r.ID, Event{Type: "drain", Message: fmt.Sprintf("not moved off draining node %s: %v", id, err)})
			case moved:
				derr.Moved++
			}
		}
		for _, r := range cp.recordsOn(id) {
			if _, failed := derr.Failed[r.ID]; !failed && tried[r.ID] == 0 {
				again = true
			}
		}
		if !again {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(drainRetryDelay):
		}
	}
	for key, err := range cp.drainSnapshots(ctx, id) {
		derr.Failed["snapshot "+key] = err
	}
	if len(derr.Failed) > 0 {
		return derr
	}
	return ctx.Err()
}

// recordsOn lists the sandboxes of node id that have not ended.
func (cp *ControlPlane) recordsOn(id string) []*record {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []*record
	for _, r := range cp.sandboxes {
		if !terminal(r.State) && cp.nodeID(r.Node) == id {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// emptyPools moves node id's share of the warm pools to the other nodes
// and drops its pooled sandboxes: nobody claimed them, so nothing is lost.
func (cp *ControlPlane) emptyPools(ctx context.Context, id string) {
	cp.applyPools(ctx) // the node takes no sandboxes: its share goes elsewhere
	n, err := cp.node(id, "")
	if err != nil {
		return
	}
	info, err := n.Info(ctx)
	if err != nil {
		cp.log.Warn("drain: pools of the node", "node", id, "err", err)
		return
	}
	for tpl := range info.Pools {
		if err := n.SetPool(ctx, nodeapi.PoolRequest{Template: nodeapi.TemplateSpec{ID: tpl}}); err != nil {
			cp.log.Warn("drain: empty pool", "node", id, "template", tpl, "err", err)
		}
	}
}

// drainOne moves sandbox r off node from, with its lock held (a start in
// progress holds it: the move waits for it). moved is false when it was
// not on the node any more.
func (cp *ControlPlane) drainOne(ctx context.Context, r *record, from string) (moved bool, err error) {
	r.lock.Lock()
	defer r.lock.Unlock()
	mv, release, err := cp.beginMove(ctx, r, from)
	if err != nil || mv == nil {
		return false, err
	}
	defer release()
	if err := cp.advanceMove(ctx, r, mv); err != nil {
		return false, err
	}
	return true, nil
}

// beginMove settles what an earlier move of r left, chooses the target,
// records the move, suspends the sandbox if it runs and holds its
// snapshots (until release): everything before the copies, with r.lock
// held. A nil move is a sandbox that is not on node from any more.
func (cp *ControlPlane) beginMove(ctx context.Context, r *record, from string) (*move, func(), error) {
	if err := cp.settleMove(ctx, r); err != nil {
		return nil, nil, err
	}
	s := cp.snapshot(r)
	if terminal(s.State) || cp.nodeID(s.Node) != from {
		return nil, nil, nil
	}
	switch s.State {
	case apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended:
	default:
		return nil, nil, fmt.Errorf("it is %s", s.State)
	}
	if len(s.Mounts) > 0 {
		return nil, nil, fmt.Errorf("it mounts volume %s, which lives on this node (volumes do not move); kill it, or drain it after it has stopped", s.Mounts[0].Name)
	}
	snaps, release, err := cp.holdForMove(s.ID, from)
	if err != nil {
		return nil, nil, err
	}
	mv, err := cp.recordMove(ctx, r, from, snaps)
	if err != nil {
		release()
		return nil, nil, err
	}
	return mv, release, nil
}

// recordMove records the move of r to the node placement picks and
// suspends r if it runs.
func (cp *ControlPlane) recordMove(ctx context.Context, r *record, from string, snaps []movedSnapshot) (*move, error) {
	s := cp.snapshot(r)
	to, err := cp.placeMove(s, from)
	if err != nil {
		return nil, err
	}
	mv := &move{
		Sandbox: s.ID, From: from, To: to, Was: s.State, DiskMB: s.DiskMB,
		ExpiresAt: s.ExpiresAt, SuspendedAt: s.SuspendedAt, Snapshots: snaps,
	}
	if err := cp.putMove(mv); err != nil {
		return nil, err
	}
	if s.State != apiv1.StateSuspended {
		if err := cp.suspend(ctx, r, "moving to node "+to+" off draining node "+from); err != nil {
			// Suspend leaves the sandbox as it was when it fails.
			cp.dropMove(s.ID)
			return nil, fmt.Errorf("suspend: %w", err)
		}
	}
	s = cp.snapshot(r)
	mv.Suspended, mv.Image = s.SuspendedAt, s.Image
	if err := cp.putMove(mv); err != nil {
		cp.rollbackMove(ctx, r, mv)
		return nil, err
	}
	// Whatever is at the sandbox's names on the target is a leftover of
	// an earlier move whose rollback could not reach it: older than this.
	if dst, err := cp.node(to, s.ID); err == nil {
		cp.dropCopy(ctx, dst, rootVolume(s.ID), mv.Image)
	}
	return mv, nil
}

// placeMove chooses the node a sandbox of node from moves to: one that
// holds its template if any can take it, else any that can.
func (cp *ControlPlane) placeMove(s Sandbox, from string) (string, error) {
	// Only a node with its backend can restore its images.
	req := cluster.PlaceRequest{Template: s.TemplateID, VCPUs: s.VCPUs, MemoryMB: s.MemoryMB, DiskMB: s.DiskMB, Runtime: s.RuntimeName()}
	var err error
	for _, tpl := range []string{s.TemplateID, ""} {
		req.Template = tpl
		// The node itself is not schedulable while it drains; should it
		// be (a drain outside the registry), another try picks another.
		for try := 0; try < 3; try++ {
			var to string
			if to, err = cp.cfg.Nodes.Place(req); err != nil {
				break
			}
			if to != from {
				return to, nil
			}
			err = fmt.Errorf("no node but %s can take it", from)
		}
	}
	return "", fmt.Errorf("place: %w", err)
}

// holdForMove lists the snapshots of sandbox id on node from and holds
// them for the move, so that nothing deletes them meanwhile. A snapshot
// that another operation reads (a start from it) is errBusy: its reader
// uses the copy on from.
func (cp *ControlPlane) holdForMove(id, from string) ([]movedSnapshot, func(), error) {
	cp.snapMu.Lock()
	defer cp.snapMu.Unlock()
	all, err := cp.Snapshots(id)
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []movedSnapshot
	for _, snap := range all {
		if cp.nodeID(snap.Node) != from {
			continue
		}
		key := snapshotKey(snap.SandboxID, snap.Name)
		if users := cp.snapshotUsers[key]; len(users) > 0 {
			return nil, nil, fmt.Errorf("%w: snapshot %s is in use by %s", errBusy, snap.Name, strings.Join(users, " and "))
		}
		out = append(out, movedSnapshot{Key: key, Volume: snap.Volume, Image: snap.Image})
	}
	return out, cp.holdKeys(keysOf(out), "a move to another node"), nil
}

func keysOf(snaps []movedSnapshot) []string {
	keys := make([]string, len(snaps))
	for i, s := range snaps {
		keys[i] = s.Key
	}
	return keys
}

// holdKeys marks snapshots in use by op (cp.snapMu held) and returns
// their release.
func (cp *ControlPlane) holdKeys(keys []string, op string) func() {
	for _, k := range keys {
		cp.snapshotUsers[k] = append(cp.snapshotUsers[k], op)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cp.snapMu.Lock()
			defer cp.snapMu.Unlock()
			for _, k := range keys {
				users := cp.snapshotUsers[k]
				if i := slices.Index(users, op); i >= 0 {
					users = slices.Delete(users, i, i+1)
				}
				if len(users) == 0 {
					delete(cp.snapshotUsers, k)
				} else {
					cp.snapshotUsers[k] = users
				}
			}
		})
	}
}

func (cp *ControlPlane) putMove(mv *move) error {
	if err := cp.cfg.Store.Put(moveBucket, mv.Sandbox, mv); err != nil {
		return fmt.Errorf("record the move of %s: %w", mv.Sandbox, err)
	}
	return nil
}

func (cp *ControlPlane) dropMove(id string) {
	if err := cp.cfg.Store.Delete(moveBucket, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		cp.log.Error("forget a move", "sandbox", id, "err", err)
	}
}

// pendingMove is the move of sandbox id an earlier step left, if any.
func (cp *ControlPlane) pendingMove(id string) (*move, error) {
	var mv move
	err := cp.cfg.Store.Get(moveBucket, id, &mv)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the move of %s: %w", id, err)
	}
	return &mv, nil
}

// settleMove finishes or rolls back the move of r that an earlier process
// (or an earlier drain) left, with r.lock held; no move is nothing to do.
func (cp *ControlPlane) settleMove(ctx context.Context, r *record) error {
	mv, err := cp.pendingMove(r.ID)
	if err != nil || mv == nil {
		return err
	}
	s := cp.snapshot(r)
	switch {
	case terminal(s.State):
		// Ended meanwhile: its node released it; the copies on the other
		// node belong to nobody and its sweep removes them.
		cp.dropMove(s.ID)
		return nil
	case cp.nodeID(s.Node) == mv.To:
		cp.recordEvent(s.ID, Event{Type: "drain", Message: "move from node " + mv.From + " interrupted after the switch; finishing it"})
		cp.finishMove(ctx, r, mv)
		return nil
	case cp.continuable(s, mv):
		cp.recordEvent(s.ID, Event{Type: "drain", Message: "move to node " + mv.To + " interrupted; going on"})
		return cp.advanceMove(ctx, r, mv)
	}
	cp.recordEvent(s.ID, Event{Type: "drain", Message: "move to node " + mv.To + " interrupted; rolled back"})
	cp.rollbackMove(ctx, r, mv)
	return nil
}

// continuable reports whether an interrupted move of s can go on: s is
// still suspended from the move's own suspend (so the copies are of what
// it is) and the target answers.
func (cp *ControlPlane) continuable(s Sandbox, mv *move) bool {
	if s.State != apiv1.StateSuspended || mv.Suspended == nil || s.SuspendedAt == nil ||
		!s.SuspendedAt.Equal(*mv.Suspended) || s.Image != mv.Image {
		return false
	}
	_, err := cp.node(mv.To, s.ID)
	return err == nil
}

// advanceMove copies what the move carries to its target, switches the
// records to it and finishes the move; a copy that fails rolls it back.
func (cp *ControlPlane) advanceMove(ctx context.Context, r *record, mv *move) error {
	if err := cp.copyMove(ctx, mv); err != nil {
		cp.rollbackMove(ctx, r, mv)
		return err
	}
	crashpoint.Hit("drain-copied")
	if err := cp.switchMove(r, mv, mv.To); err != nil {
		cp.rollbackMove(ctx, r, mv)
		return err
	}
	crashpoint.Hit("drain-switched")
	cp.finishMove(ctx, r, mv)
	return nil
}

// copyMove streams the sandbox's root volume, suspend image and snapshots
// from the move's node to its target. What the target already holds is
// not copied again: a volume or an image appears there whole or not at
// all, and a snapshot's never changes.
func (cp *ControlPlane) copyMove(ctx context.Context, mv *move) error {
	src, err := cp.node(mv.From, mv.Sandbox)
	if err != nil {
		return err
	}
	dst, err := cp.node(mv.To, mv.Sandbox)
	if err != nil {
		return err
	}
	if err := copyVolume(ctx, src, dst, nodeapi.ReceiveVolumeRequest{Name: rootVolume(mv.Sandbox), Writable: true, DiskMB: mv.DiskMB}); err != nil {
		return fmt.Errorf("move the root volume to node %s: %w", mv.To, err)
	}
	if err := copyImage(ctx, src, dst, mv.Image); err != nil {
		return fmt.Errorf("move the memory image to node %s: %w", mv.To, err)
	}
	for _, snap := range mv.Snapshots {
		if err := copySnapshot(ctx, src, dst, snap); err != nil {
			return fmt.Errorf("move snapshot %s to node %s: %w", snap.Key, mv.To, err)
		}
	}
	return nil
}

func copySnapshot(ctx context.Context, src, dst Node, snap movedSnapshot) error {
	if err := copyVolume(ctx, src, dst, nodeapi.ReceiveVolumeRequest{Name: snap.Volume}); err != nil {
		return err
	}
	return copyImage(ctx, src, dst, snap.Image)
}

// copyVolume streams a volume from src to dst unless dst has it.
func copyVolume(ctx context.Context, src, dst Node, req nodeapi.ReceiveVolumeRequest) error {
	if ok, err := dst.VolumeExists(ctx, req.Name); err == nil && ok {
		return nil
	}
	err := pipe(ctx,
		func(ctx context.Context, w io.Writer) error { return src.SendVolume(ctx, req.Name, w) },
		func(ctx context.Context, r io.Reader) error { return dst.ReceiveVolume(ctx, req, r) })
	if errors.Is(err, nodeapi.ErrExists) {
		if ok, verr := dst.VolumeExists(ctx, req.Name); verr == nil && ok {
			return nil
		}
	}
	return err
}

// copyImage streams a checkpoint image from src to dst unless dst holds
// it complete; "" is none.
func copyImage(ctx context.Context, src, dst Node, image string) error {
	if image == "" {
		return nil
	}
	if info, err := dst.Image(ctx, image); err == nil && info.Complete {
		return nil
	}
	err := pipe(ctx,
		func(ctx context.Context, w io.Writer) error { return src.SendImage(ctx, image, w) },
		func(ctx context.Context, r io.Reader) error { return dst.ReceiveImage(ctx, image, r) })
	if errors.Is(err, nodeapi.ErrExists) {
		if info, verr := dst.Image(ctx, image); verr == nil && info.Complete {
			return nil
		}
	}
	return err
}

// errReceived ends a send whose receiver has what it needs.
var errReceived = errors.New("the receiver has the whole stream")

// pipe runs send into one end of a pipe and receive from the other, at
// once: the bytes stream from node to node through this process, never
// held whole. The receiver decides: once it has the whole stream the
// transfer succeeded, whatever the sender says of what followed.
func pipe(ctx context.Context, send func(context.Context, io.Writer) error, receive func(context.Context, io.Reader) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		err := send(ctx, pw)
		pw.CloseWithError(err) // nil: the receiver reads io.EOF
		sent <- err
	}()
	rerr := receive(ctx, pr)
	if rerr == nil {
		pr.CloseWithError(errReceived)
	} else {
		pr.CloseWithError(rerr)
		cancel()
	}
	serr := <-sent
	if rerr == nil {
		return nil
	}
	if serr != nil && !errors.Is(serr, rerr) && !errors.Is(serr, context.Canceled) {
		// The sender's failure is the cause of the receiver's.
		return fmt.Errorf("send: %w (receive: %v)", serr, rerr)
	}
	return rerr
}

// switchMove points the sandbox's and its snapshots' records at node to;
// the snapshots go first, so that a sandbox on to never has one left
// behind. Every copy exists on both nodes while it runs, so the records
// may name either.
func (cp *ControlPlane) switchMove(r *record, mv *move, to string) error {
	for _, snap := range mv.Snapshots {
		if err := cp.setSnapshotNode(snap.Key, to); err != nil {
			return err
		}
	}
	// The same backend on another node may isolate otherwise (KVM on one,
	// emulation on the other): the sandbox reports what it runs under now.
	isolation := r.Isolation
	if iso, err := cp.isolation(to, r.RuntimeName()); err == nil {
		isolation = iso
	} else {
		cp.log.Warn("isolation of a moved sandbox", "sandbox", r.ID, "node", to, "err", err)
	}
	return cp.update(r, func(s *Sandbox) { s.Node, s.Isolation = to, isolation })
}

// setSnapshotNode records that a snapshot's data is on node to; a
// snapshot deleted meanwhile is no error.
func (cp *ControlPlane) setSnapshotNode(key, to string) error {
	snap, err := cp.findSnapshotKey(key)
	if err != nil {
		return nil
	}
	if cp.nodeID(snap.Node) == to {
		return nil
	}
	snap.Node = to
	if err := cp.cfg.Store.Put(snapshotBucket, key, snap); err != nil {
		return fmt.Errorf("switch snapshot %s to node %s: %w", key, to, err)
	}
	return nil
}

// finishMove ends a move whose records name the target: the copies on the
// node it left go, and a sandbox that ran runs again, on the target, with
// its expiry as it was. A resume that fails leaves it suspended on the
// target, whole: it resumes there on next use.
func (cp *ControlPlane) finishMove(ctx context.Context, r *record, mv *move) {
	for _, snap := range mv.Snapshots {
		if err := cp.setSnapshotNode(snap.Key, mv.To); err != nil {
			cp.log.Error("switch snapshot", "snapshot", snap.Key, "err", err)
		}
	}
	if src, err := cp.node(mv.From, ""); err != nil {
		cp.log.Warn("drain: copies left on the node (its sweep removes them when it is back)", "sandbox", mv.Sandbox, "node", mv.From, "err", err)
	} else {
		cp.dropSandboxCopy(ctx, src, mv)
	}
	cp.recordEvent(mv.Sandbox, Event{Type: "moved", Message: "moved from node " + mv.From + " to node " + mv.To})
	s := cp.snapshot(r)
	if (mv.Was == apiv1.StateRunning || mv.Was == apiv1.StatePaused) && s.State == apiv1.StateSuspended {
		if err := cp.resumeAfterMove(ctx, r, mv); err != nil {
			cp.log.Error("drain: resume after the move", "sandbox", mv.Sandbox, "node", mv.To, "err", err)
			cp.recordEvent(mv.Sandbox, Event{Type: "drain", Message: fmt.Sprintf("could not run again on node %s (%v); suspended there", mv.To, err)})
		}
	}
	cp.dropMove(mv.Sandbox)
}

// resumeAfterMove brings a moved sandbox back to the state the move found
// it in, on the node it is on now.
func (cp *ControlPlane) resumeAfterMove(ctx context.Context, r *record, mv *move) error {
	if err := cp.resume(ctx, r); err != nil {
		return err
	}
	if err := cp.update(r, func(s *Sandbox) { s.ExpiresAt, s.SuspendedAt = mv.ExpiresAt, mv.SuspendedAt }); err != nil {
		return err
	}
	if mv.Was != apiv1.StatePaused {
		return nil
	}
	n, err := cp.nodeFor(r)
	if err != nil {
		return err
	}
	return cp.step(r, apiv1.StatePausing, apiv1.StatePaused, "", func() error { return n.Pause(ctx, r.ID) })
}

// rollbackMove undoes a move that did not switch: the records name the
// node it left (where everything still is), the copies on the target go,
// and a sandbox the move suspended runs again there.
func (cp *ControlPlane) rollbackMove(ctx context.Context, r *record, mv *move) {
	ctx = context.WithoutCancel(ctx)
	if err := cp.switchMove(r, mv, mv.From); err != nil {
		// The move record stays: the next reconcile or drain settles it.
		cp.log.Error("drain: roll back a move", "sandbox", mv.Sandbox, "err", err)
		return
	}
	if dst, err := cp.node(mv.To, ""); err != nil {
		cp.log.Warn("drain: copies left on the target (its sweep removes them when it is back)", "sandbox", mv.Sandbox, "node", mv.To, "err", err)
	} else {
		cp.dropSandboxCopy(ctx, dst, mv)
	}
	s := cp.snapshot(r)
	ours := mv.Suspended == nil || s.SuspendedAt != nil && s.SuspendedAt.Equal(*mv.Suspended)
	if (mv.Was == apiv1.StateRunning || mv.Was == apiv1.StatePaused) && s.State == apiv1.StateSuspended && ours {
		if err := cp.resumeAfterMove(ctx, r, mv); err != nil {
			cp.log.Error("drain: resume after a failed move", "sandbox", mv.Sandbox, "err", err)
			cp.recordEvent(mv.Sandbox, Event{Type: "drain", Message: fmt.Sprintf("could not run again after a failed move (%v); suspended", err)})
		}
	}
	cp.dropMove(mv.Sandbox)
}

// dropSandboxCopy deletes what a move put (or left) of its sandbox on n:
// the root volume (with the node's handle of the sandbox), the suspend
// image and the snapshots' data.
func (cp *ControlPlane) dropSandboxCopy(ctx context.Context, n Node, mv *move) {
	ctx = context.WithoutCancel(ctx)
	// Destroy also lets go of the handle (and its sessions) the node kept
	// of the suspended sandbox; nothing of it runs.
	if err := n.Destroy(ctx, mv.Sandbox); err != nil {
		cp.log.Warn("drain: drop the root volume", "sandbox", mv.Sandbox, "err", err)
	}
	cp.dropCopy(ctx, n, rootVolume(mv.Sandbox), mv.Image)
	for _, snap := range mv.Snapshots {
		cp.dropCopy(ctx, n, snap.Volume, snap.Image)
	}
}

// dropCopy deletes a volume and an image ("" none) on n.
func (cp *ControlPlane) dropCopy(ctx context.Context, n Node, volume, image string) {
	ctx = context.WithoutCancel(ctx)
	if err := n.DeleteVolume(ctx, volume); err != nil {
		cp.log.Warn("drain: drop a volume", "volume", volume, "err", err)
	}
	if err := cp.removeImage(ctx, n, image); err != nil {
		cp.log.Warn("drain: drop an image", "image", image, "err", err)
	}
}

// drainSnapshots moves the snapshots left on node id whose sandbox is
// gone (or ended). A snapshot never changes, so no record is needed: a
// crash between copy and switch leaves a copy on the target that its
// sweep removes, one between switch and delete a copy on the node that
// its sweep removes. It returns the snapshots it could not move.
func (cp *ControlPlane) drainSnapshots(ctx context.Context, id string) map[string]error {
	failed := map[string]error{}
	all, err := cp.Snapshots("")
	if err != nil {
		failed["*"] = err
		return failed
	}
	for _, snap := range all {
		if cp.nodeID(snap.Node) != id {
			continue
		}
		if r, err := cp.lookup(snap.SandboxID); err == nil && !terminal(cp.snapshot(r).State) {
			continue // it moves with its sandbox (or stays with it)
		}
		key := snapshotKey(snap.SandboxID, snap.Name)
		if err := cp.moveSnapshot(ctx, snap, id); err != nil {
			cp.log.Warn("drain: snapshot not moved", "snapshot", key, "node", id, "err", err)
			failed[key] = err
		}
	}
	return failed
}

// moveSnapshot moves one snapshot of a sandbox that is gone off node from.
func (cp *ControlPlane) moveSnapshot(ctx context.Context, snap Snapshot, from string) error {
	key := snapshotKey(snap.SandboxID, snap.Name)
	if len(snap.Mounts) > 0 {
		// A sandbox started from it must mount the volume, which stays here.
		return fmt.Errorf("its sandbox mounted volume %s, which lives on this node (volumes do not move)", snap.Mounts[0].Name)
	}
	cp.snapMu.Lock()
	if users := cp.snapshotUsers[key]; len(users) > 0 {
		cp.snapMu.Unlock()
		return fmt.Errorf("it is in use by %s", strings.Join(users, " and "))
	}
	release := cp.holdKeys([]string{key}, "a move to another node")
	cp.snapMu.Unlock()
	defer release()
	to, err := cp.placeMove(Sandbox{ID: snap.SandboxID, DiskMB: int(snap.SizeBytes >> 20), TemplateID: snap.TemplateID}, from)
	if err != nil {
		return err
	}
	src, err := cp.node(from, "")
	if err != nil {
		return err
	}
	dst, err := cp.node(to, "")
	if err != nil {
		return err
	}
	ms := movedSnapshot{Key: key, Volume: snap.Volume, Image: snap.Image}
	if err := copySnapshot(ctx, src, dst, ms); err != nil {
		return fmt.Errorf("copy to node %s: %w", to, err)
	}
	if err := cp.setSnapshotNode(key, to); err != nil {
		return err
	}
	cp.dropCopy(ctx, src, snap.Volume, snap.Image)
	return nil
}

// movesTouching lists the pending moves to or from node id: a reconcile of
// the node keeps what they copied there, and settles them.
func (cp *ControlPlane) movesTouching(id string) []move {
	all, err := store.All[move](cp.cfg.Store, moveBucket)
	if err != nil {
		cp.log.Warn("list moves", "err", err)
		return nil
	}
	var out []move
	for _, mv := range all {
		if mv.From == id || mv.To == id {
			out = append(out, mv)
		}
	}
	return out
}

// movedHere adds to keep, images and volumes what pending moves put on
// node id, which the node's records do not name yet.
func (cp *ControlPlane) movedHere(id string, keep *[]string, images, volumes map[string]bool) {
	for _, mv := range cp.movesTouching(id) {
		if mv.To != id {
			continue
		}
		if keep != nil {
			*keep = append(*keep, mv.Sandbox)
		}
		if images != nil && mv.Image != "" {
			images[mv.Image] = true
		}
		for _, snap := range mv.Snapshots {
			if images != nil && snap.Image != "" {
				images[snap.Image] = true
			}
			if volumes != nil {
				volumes[snap.Volume] = true
			}
		}
	}
}

// settleMovesOf settles the pending moves to or from node id whose
// sandbox no operation holds now (reconcile).
func (cp *ControlPlane) settleMovesOf(ctx context.Context, id string) {
	for _, mv := range cp.movesTouching(id) {
		r, err := cp.lookup(mv.Sandbox)
		if err != nil {
			cp.dropMove(mv.Sandbox) // the sandbox is forgotten
			continue
		}
		if !r.lock.TryLock() {
			continue // its operation (a drain) settles it
		}
		if err := cp.settleMove(ctx, r); err != nil {
			cp.log.Error("settle an interrupted move", "sandbox", mv.Sandbox, "err", err)
		}
		r.lock.Unlock()
	}
}

// Drainer runs DrainNode in the background for the node registry (it is a
// cluster.Drainer): one drain per node at a time, each until it ends or
// the context given to Start does. The registry is made before the control
// plane, so a Drainer starts empty and Start gives it the control plane.
type Drainer struct {
	mu      sync.Mutex
	ctx     context.Context
	cp      *ControlPlane
	report  func(node string, err error)
	running map[string]bool
	wg      sync.WaitGroup
}

var _ cluster.Drainer = (*Drainer)(nil)

// Start lets the drainer run drains on cp until ctx ends; report, when
// set, hears how each ended (nil: every sandbox and snapshot moved).
func (d *Drainer) Start(ctx context.Context, cp *ControlPlane, report func(node string, err error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx, d.cp, d.report = ctx, cp, report
	if d.running == nil {
		d.running = map[string]bool{}
	}
}

// StartDrain starts draining node id in the background; a drain of the
// node already running is left to go on.
func (d *Drainer) StartDrain(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cp == nil {
		return errors.New("the control plane is not started yet; drain the node again once it is")
	}
	if d.running[id] {
		return nil
	}
	d.running[id] = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		err := d.cp.DrainNode(d.ctx, id)
		if err != nil {
			d.cp.log.Error("drain", "node", id, "err", err)
		} else {
			d.cp.log.Info("drain finished", "node", id)
		}
		d.mu.Lock()
		delete(d.running, id)
		report := d.report
		d.mu.Unlock()
		if report != nil {
			report(id, err)
		}
	}()
	return nil
}

// Wait waits for the drains running now to end.
func (d *Drainer) Wait() { d.wg.Wait() }

// DrainReason is what a node's reason says once a drain ended.
func DrainReason(err error) string {
	var derr *DrainError
	switch {
	case err == nil:
		return "drained: every sandbox moved to other nodes"
	case errors.As(err, &derr):
		return fmt.Sprintf("drain ended: %d moved, %d could not be moved (see their events)", derr.Moved, len(derr.Failed))
	}
	return "drain stopped: " + err.Error()
}
