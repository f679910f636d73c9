package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

const snapshotBucket = "snapshots"

// Snapshot is a captured filesystem and memory image of a sandbox.
type Snapshot struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	SandboxID string    `json:"sandbox_id"`
	CreatedAt time.Time `json:"created_at"`
	// Rolling snapshots are taken on a schedule and pruned after the
	// sandbox's retention.
	Rolling bool `json:"rolling,omitempty"`
	// Volume is the read-only filesystem, Image the memory image (both
	// named on the node).
	Volume string `json:"volume"`
	Image  string `json:"image,omitempty"`
	// LegacyImageDir is the image's path as earlier versions recorded
	// it; Recover turns it into Image.
	LegacyImageDir string `json:"image_dir,omitempty"`
	// The source's template and the token its agent held, for restores.
	Template    string `json:"template"`
	TemplateID  string `json:"template_id"`
	AccessToken string `json:"access_token"`
	SizeBytes   int64  `json:"size_bytes"`
	// Project is the source sandbox's project, which owns the snapshot.
	Project string `json:"project,omitempty"`
	// Node holds the volume and image (the source sandbox's node; "" as
	// on sandboxes).
	Node string `json:"node,omitempty"`
	// Mounts are the persistent volumes the source mounted: not part of
	// the snapshot, mounted again (live) by a sandbox started from it.
	Mounts []Mount `json:"mounts,omitempty"`
	// Runtime and Isolation are the source's (see Sandbox): an image is
	// restored by the backend that took it and no other.
	Runtime   string `json:"runtime,omitempty"`
	Isolation string `json:"isolation,omitempty"`
}

// RuntimeName is the backend the snapshot was taken under.
func (s Snapshot) RuntimeName() string {
	if s.Runtime == "" {
		return runtime.GVisor
	}
	return s.Runtime
}

// source is what a sandbox started from the snapshot restores from.
func (s Snapshot) source() Source {
	return Source{Volume: s.Volume, Image: s.Image, AccessToken: s.AccessToken, Snapshot: snapshotKey(s.SandboxID, s.Name), Node: s.Node}
}

// API returns the public view of a snapshot.
func (s Snapshot) API() apiv1.Snapshot {
	return apiv1.Snapshot{ID: s.ID, Name: s.Name, SandboxID: s.SandboxID, CreatedAt: s.CreatedAt, SizeBytes: s.SizeBytes}
}

var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func snapshotKey(sandboxID, name string) string { return sandboxID + "/" + name }

// CreateSnapshot captures a running (or paused) sandbox's memory and
// filesystem; it is frozen only while the capture runs.
func (cp *ControlPlane) CreateSnapshot(ctx context.Context, id, name string) (Snapshot, error) {
	var snap Snapshot
	_, err := cp.locked(id, func(r *record) error {
		var err error
		snap, err = cp.snapshot1(ctx, r, name, false)
		return err
	})
	return snap, err
}

// snapshot1 takes one snapshot with r.lock held.
func (cp *ControlPlane) snapshot1(ctx context.Context, r *record, name string, rolling bool) (Snapshot, error) {
	if name == "" {
		prefix := "snap-"
		if rolling {
			prefix = "auto-"
		}
		name = prefix + time.Now().UTC().Format("20060102-150405.000")
	}
	if !snapshotName.MatchString(name) {
		return Snapshot{}, invalid("snapshot name %q: use 1-64 letters, digits, '.', '_' or '-'", name)
	}
	if err := cp.require(r, "take a snapshot", apiv1.StateRunning, apiv1.StatePaused); err != nil {
		return Snapshot{}, err
	}
	if _, err := cp.findSnapshot(r.ID, name); err == nil {
		return Snapshot{}, &StateError{ID: r.ID, State: "holding a snapshot named " + name, Want: "take another with the same name"}
	}
	s := cp.snapshot(r)
	n, err := cp.nodeOf(s)
	if err != nil {
		return Snapshot{}, err
	}
	if err := cp.checkSnapshotQuota(s.Project); err != nil {
		return Snapshot{}, err
	}
	snapID := newID()
	snap := Snapshot{
		ID: snapID, Name: name, SandboxID: s.ID, CreatedAt: time.Now().UTC(), Rolling: rolling,
		Volume: path.Join("snapshots", s.ID, snapID), Image: snapshotImage(s.ID, snapID),
		Template: s.Template, TemplateID: s.TemplateID, AccessToken: s.AccessToken, Project: project.Of(s.Project),
		Node: s.Node, Mounts: s.Mounts, Runtime: s.Runtime, Isolation: s.Isolation,
	}
	back := s.State
	err = cp.step(r, apiv1.StateSnapshotting, back, "", func() error {
		return n.Capture(ctx, nodeapi.CaptureRequest{ID: s.ID, Volume: snap.Volume, Image: snap.Image})
	})
	if err != nil {
		return Snapshot{}, err
	}
	crashpoint.Hit("snapshot-captured")
	if info, err := n.Image(ctx, snap.Image); err == nil {
		snap.SizeBytes = info.SizeBytes
	} else {
		cp.log.Warn("size of snapshot image", "snapshot", snap.ID, "err", err)
	}
	if err := cp.cfg.Store.Put(snapshotBucket, snapshotKey(s.ID, name), snap); err != nil {
		cp.dropSnapshotData(ctx, n, snap)
		return Snapshot{}, fmt.Errorf("record snapshot: %w", err)
	}
	now := snap.CreatedAt
	_ = cp.update(r, func(s *Sandbox) { s.LastSnapshotAt = &now })
	cp.recordEvent(s.ID, Event{Type: "snapshot", Message: "snapshot " + name + " taken"})
	return snap, nil
}

// Snapshots lists a sandbox's snapshots, oldest first. They outlive the
// sandbox, so the sandbox need not exist any more.
func (cp *ControlPlane) Snapshots(sandboxID string) ([]Snapshot, error) {
	var out []Snapshot
	err := cp.cfg.Store.Each(snapshotBucket, func(key string, data []byte) error {
		if sandboxID != "" && !strings.HasPrefix(key, sandboxID+"/") {
			return nil
		}
		var s Snapshot
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// findSnapshot finds a snapshot by sandbox and name.
func (cp *ControlPlane) findSnapshot(sandboxID, name string) (Snapshot, error) {
	var s Snapshot
	if err := cp.cfg.Store.Get(snapshotBucket, snapshotKey(sandboxID, name), &s); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s of sandbox %s: %w", name, sandboxID, ErrNotFound)
	}
	return s, nil
}

// ResolveSnapshot finds a snapshot the scope sees by "<sandbox>/<name>" or
// by its id; another project's snapshot is not found, like a missing one.
func (cp *ControlPlane) ResolveSnapshot(scope project.Scope, ref string) (Snapshot, error) {
	s, err := cp.resolveSnapshot(ref)
	if err == nil && !scope.Sees(s.Project) {
		if sbx, name, ok := strings.Cut(ref, "/"); ok {
			return Snapshot{}, fmt.Errorf("snapshot %s of sandbox %s: %w", name, sbx, ErrNotFound)
		}
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", ref, ErrNotFound)
	}
	return s, err
}

func (cp *ControlPlane) resolveSnapshot(ref string) (Snapshot, error) {
	if sbx, name, ok := strings.Cut(ref, "/"); ok {
		return cp.findSnapshot(sbx, name)
	}
	all, err := cp.Snapshots("")
	if err != nil {
		return Snapshot{}, err
	}
	for _, s := range all {
		if s.ID == ref {
			return s, nil
		}
	}
	return Snapshot{}, fmt.Errorf("snapshot %s: %w", ref, ErrNotFound)
}

// DeleteSnapshot removes a snapshot's record, filesystem and image. A
// snapshot that a restore or a start from it is reading cannot be deleted
// until that ends: the answer is a StateError (409) naming the operations.
func (cp *ControlPlane) DeleteSnapshot(sandboxID, name string) error {
	cp.snapMu.Lock()
	snap, err := cp.findSnapshot(sandboxID, name)
	if err != nil {
		cp.snapMu.Unlock()
		return err
	}
	if users := cp.snapshotUsers[snapshotKey(sandboxID, name)]; len(users) > 0 {
		cp.snapMu.Unlock()
		return &StateError{ID: sandboxID, State: "lending snapshot " + name + " to " + strings.Join(users, " and "),
			Want: "delete that snapshot until the operation ends"}
	}
	err = cp.cfg.Store.Delete(snapshotBucket, snapshotKey(sandboxID, name))
	cp.snapMu.Unlock()
	if err != nil {
		return err
	}
	// Nothing can take the snapshot any more: its record is gone.
	n, err := cp.node(snap.Node, "")
	if err != nil {
		// What is left on the node, its sweep removes when it comes back.
		cp.log.Warn("delete snapshot data", "snapshot", snap.ID, "err", err)
		return nil
	}
	cp.dropSnapshotData(context.Background(), n, snap)
	return nil
}

// holdSnapshot finds a snapshot with resolve and marks it in use by op (a
// phrase such as "a restore of sandbox X") until release is called, so
// DeleteSnapshot refuses it meanwhile. Finding and marking are one step
// under snapMu: a snapshot found here is never deleted under its user.
func (cp *ControlPlane) holdSnapshot(resolve func() (Snapshot, error), op string) (snap Snapshot, release func(), err error) {
	cp.snapMu.Lock()
	defer cp.snapMu.Unlock()
	if snap, err = resolve(); err != nil {
		return Snapshot{}, nil, err
	}
	return snap, cp.holdKeys([]string{snapshotKey(snap.SandboxID, snap.Name)}, op), nil
}

// dropSnapshotData deletes a snapshot's volume and image on n, its node.
func (cp *ControlPlane) dropSnapshotData(ctx context.Context, n Node, s Snapshot) {
	ctx = context.WithoutCancel(ctx)
	if err := n.DeleteVolume(ctx, s.Volume); err != nil {
		cp.log.Error("delete snapshot volume", "snapshot", s.ID, "err", err)
	}
	if err := cp.removeImage(ctx, n, s.Image); err != nil {
		cp.log.Error("delete snapshot image", "snapshot", s.ID, "err", err)
	}
}

// ReadSnapshotFile reads one path of a snapshot's filesystem on the
// snapshot's node, so a single earlier file can be recovered without
// restoring the sandbox: a regular file's bytes, or a directory's entry
// with an empty body (nodeapi.Control.ReadVolumeFile). name is a snapshot
// of sandboxID (or its id). The caller closes the body.
func (cp *ControlPlane) ReadSnapshotFile(ctx context.Context, sandboxID, name, p string) (io.ReadCloser, *filesystempb.EntryInfo, error) {
	snap, n, err := cp.snapshotNode(sandboxID, name)
	if err != nil {
		return nil, nil, err
	}
	return n.ReadVolumeFile(ctx, snap.Volume, p)
}

// ListSnapshotDir starts one page of a listing of a directory of a
// snapshot's filesystem, read on the snapshot's node in bounded memory.
// The caller closes it.
func (cp *ControlPlane) ListSnapshotDir(ctx context.Context, sandboxID, name, p string, opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
	snap, n, err := cp.snapshotNode(sandboxID, name)
	if err != nil {
		return nil, err
	}
	return n.ListVolumeDir(ctx, snap.Volume, p, opts)
}

// snapshotNode finds a snapshot of sandboxID by name or id, and its node.
func (cp *ControlPlane) snapshotNode(sandboxID, name string) (Snapshot, Node, error) {
	snap, err := cp.snapshotOf(sandboxID, name)
	if err != nil {
		return Snapshot{}, nil, err
	}
	n, err := cp.node(snap.Node, "")
	if err != nil {
		return Snapshot{}, nil, err
	}
	return snap, n, nil
}

// snapshotOf finds a snapshot of sandboxID by name or id.
func (cp *ControlPlane) snapshotOf(sandboxID, name string) (Snapshot, error) {
	snap, err := cp.findSnapshot(sandboxID, name)
	if err != nil {
		if byID, idErr := cp.resolveSnapshot(name); idErr == nil && byID.SandboxID == sandboxID {
			snap, err = byID, nil
		}
	}
	return snap, err
}

// Restore rolls a sandbox back in place to a snapshot (one of its own, by
// name, or any the scope sees by "<sandbox>/<name>" or id): memory, processes and
// filesystem become what they were when it was taken. The sandbox keeps
// its id, token, env and metadata.
//
// A restore that fails leaves the sandbox as it was: a running or paused
// sandbox is first suspended to its suspend image, its root volume is only
// set aside (node.ResumeFrom), and on failure both come back. The restore
// takes effect when it is recorded; recovery undoes one that was not.
func (cp *ControlPlane) Restore(ctx context.Context, scope project.Scope, id, ref string) (Sandbox, error) {
	snap, release, err := cp.holdSnapshot(func() (Snapshot, error) {
		// A snapshot of another project is passed over as if it did not
		// exist, so a ref that is also one of this sandbox's own snapshot
		// names still finds that one.
		snap, err := cp.resolveSnapshot(ref)
		if err != nil || !scope.Sees(snap.Project) {
			if snap, err = cp.findSnapshot(id, ref); err != nil {
				return Snapshot{}, err
			}
		}
		if !scope.Sees(snap.Project) {
			// Answered as findSnapshot answers a missing one.
			return Snapshot{}, fmt.Errorf("snapshot %s of sandbox %s: %w", ref, id, ErrNotFound)
		}
		return snap, nil
	}, "a restore of sandbox "+id)
	if err != nil {
		return Sandbox{}, err
	}
	defer release()
	return cp.locked(id, func(r *record) error {
		if err := cp.require(r, "restore a snapshot", apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended); err != nil {
			return err
		}
		s := cp.snapshot(r)
		n, err := cp.nodeOf(s)
		if err != nil {
			return err
		}
		if !cp.sameNode(s.Node, snap.Node) {
			// Moving a snapshot between nodes is not there yet.
			return &StateError{ID: s.ID, State: "on node " + cp.nodeID(s.Node) + " while snapshot " + snap.Name + " is on node " + cp.nodeID(snap.Node),
				Want: "restore that snapshot in place"}
		}
		if snap.RuntimeName() != s.RuntimeName() {
			return invalid("snapshot %s was taken under the %s runtime and sandbox %s runs on %s: an image of one runtime is never restored by another", snap.Name, snap.RuntimeName(), s.ID, s.RuntimeName())
		}
		from, image := s.State, suspendImage(s.ID)
		if from == apiv1.StateSuspended && s.Image != "" {
			image = s.Image
		}
		if from == apiv1.StateSuspended && s.DiskOnly {
			image = "" // its memory was dropped: a failed restore leaves it suspended on its disk
		}
		ref := snapshotKey(snap.SandboxID, snap.Name)
		// Recorded before anything moves, so that recovery after a crash
		// knows to put the old sandbox back.
		if err := cp.setState(r, apiv1.StateResuming, "restoring snapshot "+ref, func(s *Sandbox) {
			s.Restoring, s.Image = ref, image
		}); err != nil {
			return err
		}
		if from != apiv1.StateSuspended {
			// The suspend image is what a failed restore comes back from.
			if err := n.Suspend(ctx, s.ID, image); err != nil {
				// Suspend leaves the sandbox as it was when it fails.
				return cp.restoreFailed(r, ref, err, func(reason string) { cp.endRestore(r, from, reason, "") })
			}
		}
		crashpoint.Hit("restore-suspended")
		spec := nodeapi.RestoreSpec{
			ID: s.ID, Image: snap.Image, FromVolume: snap.Volume, Limits: cp.limits(s), DiskMB: s.DiskMB,
			AccessToken: snap.AccessToken, Rollback: true, Network: s.policy(), Mounts: nodeMounts(s.Mounts),
			Runtime: s.RuntimeName(),
		}
		if snap.SandboxID != s.ID || snap.AccessToken != s.AccessToken {
			spec.NewIdentity = cp.identity(s)
		}
		if err := n.ResumeFrom(ctx, spec); err != nil {
			// The node has put the old root volume back; bring back the
			// old memory too.
			return cp.restoreFailed(r, ref, err, func(reason string) { cp.unrestore(ctx, n, r, from, image, reason) })
		}
		crashpoint.Hit("restore-resumed")
		if err := cp.setState(r, apiv1.StateRunning, "restored snapshot "+snap.Name, func(s *Sandbox) {
			s.Snapshot, s.Restoring, s.Image, s.SuspendedAt, s.DiskOnly = ref, "", "", nil, false
		}); err != nil {
			return err
		}
		crashpoint.Hit("restore-recorded")
		// Recorded: the old root volume and memory are not needed any more.
		if err := n.CommitRestore(ctx, s.ID); err != nil {
			cp.log.Warn("drop the volume a restore replaced", "sandbox", s.ID, "err", err)
		}
		if err := cp.removeImage(ctx, n, image); err != nil {
			cp.log.Warn("drop the image a restore replaced", "sandbox", s.ID, "err", err)
		}
		return nil
	})
}

// restoreFailed logs why a restore failed, lets undo put the sandbox back
// (with the reason to record), and returns the error the client sees: it
// says what state the sandbox is in, and not the node's error, which names
// host paths.
func (cp *ControlPlane) restoreFailed(r *record, ref string, err error, undo func(reason string)) error {
	cp.log.Error("restore failed", "sandbox", r.ID, "snapshot", ref, "err", err)
	undo("restore of " + ref + " failed; the sandbox is as it was")
	return fmt.Errorf("restore of %s into sandbox %s failed; the sandbox is %s as it was before", ref, r.ID, cp.snapshot(r).State)
}

// unrestore brings a sandbox whose restore failed back to state from, from
// the suspend image the restore made (or had). Should that fail too, the
// sandbox stays suspended on that image: still whole, resumed on next use.
func (cp *ControlPlane) unrestore(ctx context.Context, n Node, r *record, from, image, reason string) {
	s := cp.snapshot(r)
	if from == apiv1.StateSuspended {
		cp.endRestore(r, from, reason, image)
		return
	}
	ctx = context.WithoutCancel(ctx)
	err := n.ResumeFrom(ctx, nodeapi.RestoreSpec{
		ID: s.ID, Image: image, Limits: cp.limits(s), DiskMB: s.DiskMB, AccessToken: s.AccessToken, Network: s.policy(),
		Mounts: nodeMounts(s.Mounts), Runtime: s.RuntimeName(),
	})
	if err == nil && from == apiv1.StatePaused {
		err = n.Pause(ctx, s.ID)
	}
	if err != nil {
		cp.log.Error("bring back a sandbox after a failed restore", "sandbox", s.ID, "err", err)
		if err := n.Halt(ctx, s.ID); err != nil {
			cp.log.Error("halt a sandbox after a failed restore", "sandbox", s.ID, "err", err)
		}
		cp.endRestore(r, apiv1.StateSuspended, reason+", suspended on its image", image)
		return
	}
	cp.endRestore(r, from, reason, "")
	if err := cp.removeImage(ctx, n, image); err != nil {
		cp.log.Warn("remove used suspend image", "sandbox", s.ID, "err", err)
	}
}

// endRestore records the end of a restore that did not happen.
func (cp *ControlPlane) endRestore(r *record, to, reason, image string) {
	if err := cp.setState(r, to, reason, func(s *Sandbox) {
		s.Restoring, s.Image = "", image
		if to == apiv1.StateSuspended && s.SuspendedAt == nil {
			now := time.Now().UTC()
			s.SuspendedAt = &now
		}
	}); err != nil {
		cp.log.Error("record failed restore", "sandbox", r.ID, "err", err)
	}
}

// identity is what a restored copy must be told about itself.
func (cp *ControlPlane) identity(s Sandbox) *nodeapi.Identity {
	info := map[string]string{"sandbox_id": s.ID, "restored_at": time.Now().UTC().Format(time.RFC3339Nano)}
	if s.BranchOf != "" {
		info["branch_of"] = s.BranchOf
	}
	if s.Snapshot != "" {
		info["snapshot"] = s.Snapshot
	}
	env := map[string]string{"SPACE_SANDBOX_ID": s.ID}
	for k, v := range s.Env {
		env[k] = v
	}
	return &nodeapi.Identity{AccessToken: s.AccessToken, Env: env, Info: info}
}

// pruneSnapshots removes rolling snapshots older than their sandbox's
// retention (or the default when the sandbox is gone).
func (cp *ControlPlane) pruneSnapshots(now time.Time) {
	all, err := cp.Snapshots("")
	if err != nil {
		cp.log.Error("list snapshots", "err", err)
		return
	}
	for _, s := range all {
		if !s.Rolling {
			continue
		}
		keep := cp.cfg.Defaults.SnapshotRetention
		if sb, err := cp.Get(project.Everything, s.SandboxID); err == nil && sb.Lifecycle.SnapshotRetentionS > 0 {
			keep = time.Duration(sb.Lifecycle.SnapshotRetentionS) * time.Second
		}
		if now.Sub(s.CreatedAt) > keep {
			if err := cp.DeleteSnapshot(s.SandboxID, s.Name); err != nil {
				cp.log.Error("prune snapshot", "snapshot", s.ID, "err", err)
			}
		}
	}
}

// snapshotVolumes lists the volumes of the snapshots on node id, so its
// sweep spares them.
func (cp *ControlPlane) snapshotVolumes(id string) map[string]bool {
	out := map[string]bool{}
	all, _ := store.All[Snapshot](cp.cfg.Store, snapshotBucket)
	for _, s := range all {
		if cp.nodeID(s.Node) == id {
			out[s.Volume] = true
		}
	}
	return out
}
