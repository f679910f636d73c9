package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/project"
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
	// Volume is the read-only filesystem, ImageDir the memory image.
	Volume   string `json:"volume"`
	ImageDir string `json:"image_dir"`
	// The source's template and the token its agent held, for restores.
	Template    string `json:"template"`
	TemplateID  string `json:"template_id"`
	AccessToken string `json:"access_token"`
	SizeBytes   int64  `json:"size_bytes"`
	// Project is the source sandbox's project, which owns the snapshot.
	Project string `json:"project,omitempty"`
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
	if err := cp.checkSnapshotQuota(s.Project); err != nil {
		return Snapshot{}, err
	}
	snapID := newID()
	snap := Snapshot{
		ID: snapID, Name: name, SandboxID: s.ID, CreatedAt: time.Now().UTC(), Rolling: rolling,
		Volume: path.Join("snapshots", s.ID, snapID), ImageDir: filepath.Join(cp.cfg.ImagesDir, s.ID, "snapshots", snapID),
		Template: s.Template, TemplateID: s.TemplateID, AccessToken: s.AccessToken, Project: project.Of(s.Project),
	}
	back := s.State
	err := cp.step(r, apiv1.StateSnapshotting, back, "", func() error {
		return cp.cfg.Node.Capture(ctx, s.ID, snap.Volume, snap.ImageDir)
	})
	if err != nil {
		return Snapshot{}, err
	}
	snap.SizeBytes = dirSize(snap.ImageDir)
	if err := cp.cfg.Store.Put(snapshotBucket, snapshotKey(s.ID, name), snap); err != nil {
		cp.dropSnapshotData(snap)
		return Snapshot{}, fmt.Errorf("record snapshot: %w", err)
	}
	now := snap.CreatedAt
	_ = cp.update(r, func(s *Sandbox) { s.LastSnapshotAt = &now })
	cp.recordEvent(s.ID, Event{Type: "snapshot", Message: "snapshot " + name + " taken"})
	return snap, nil
}

func dirSize(dir string) int64 {
	var total int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
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

// CheckRestoreRef reports whether sandbox id may be restored to ref in
// the scope: the snapshot Restore would pick must be one the scope sees.
// It answers exactly as Restore does for a missing snapshot.
func (cp *ControlPlane) CheckRestoreRef(scope project.Scope, id, ref string) error {
	snap, err := cp.resolveSnapshot(ref)
	if err != nil {
		if snap, err = cp.findSnapshot(id, ref); err != nil {
			return err
		}
	}
	if !scope.Sees(snap.Project) {
		return fmt.Errorf("snapshot %s of sandbox %s: %w", ref, id, ErrNotFound) // as findSnapshot says
	}
	return nil
}

// DeleteSnapshot removes a snapshot's record, filesystem and image.
func (cp *ControlPlane) DeleteSnapshot(sandboxID, name string) error {
	snap, err := cp.findSnapshot(sandboxID, name)
	if err != nil {
		return err
	}
	if err := cp.cfg.Store.Delete(snapshotBucket, snapshotKey(sandboxID, name)); err != nil {
		return err
	}
	cp.dropSnapshotData(snap)
	return nil
}

func (cp *ControlPlane) dropSnapshotData(s Snapshot) {
	if err := cp.cfg.Node.DeleteVolume(s.Volume); err != nil {
		cp.log.Error("delete snapshot volume", "snapshot", s.ID, "err", err)
	}
	if err := os.RemoveAll(s.ImageDir); err != nil {
		cp.log.Error("delete snapshot image", "snapshot", s.ID, "err", err)
	}
}

// OpenSnapshotFile opens one path of a snapshot's filesystem, so a single
// earlier file can be recovered without restoring the sandbox. name is a
// snapshot of sandboxID (or its id).
func (cp *ControlPlane) OpenSnapshotFile(sandboxID, name, p string) (*os.File, fs.FileInfo, error) {
	snap, err := cp.findSnapshot(sandboxID, name)
	if err != nil {
		if byID, idErr := cp.resolveSnapshot(name); idErr == nil && byID.SandboxID == sandboxID {
			snap, err = byID, nil
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return cp.cfg.Node.OpenInVolume(snap.Volume, p)
}

// Restore rolls a sandbox back in place to one of its snapshots: memory,
// processes and filesystem become what they were when it was taken. The
// sandbox keeps its id, token, env and metadata.
func (cp *ControlPlane) Restore(ctx context.Context, id, ref string) (Sandbox, error) {
	snap, err := cp.resolveSnapshot(ref)
	if err != nil {
		if snap, err = cp.findSnapshot(id, ref); err != nil {
			return Sandbox{}, err
		}
	}
	return cp.locked(id, func(r *record) error {
		if err := cp.require(r, "restore a snapshot", apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended); err != nil {
			return err
		}
		s := cp.snapshot(r)
		spec := node.RestoreSpec{
			ID: s.ID, ImageDir: snap.ImageDir, FromVolume: snap.Volume, Limits: cp.limits(s), DiskMB: s.DiskMB,
			AccessToken: snap.AccessToken, Rollback: true, Network: s.policy(),
		}
		if snap.SandboxID != s.ID || snap.AccessToken != s.AccessToken {
			spec.NewIdentity = cp.identity(s)
		}
		err := cp.step(r, apiv1.StateResuming, apiv1.StateRunning, "restored snapshot "+snap.Name, func() error {
			if s.State != apiv1.StateSuspended {
				cp.cfg.Node.Halt(ctx, s.ID)
			}
			return cp.cfg.Node.ResumeFrom(ctx, spec)
		}, func(s *Sandbox) { s.Snapshot = snap.SandboxID + "/" + snap.Name })
		if err != nil {
			// The old runtime is gone; what is left is the suspended image,
			// if there was one, or nothing that runs.
			cp.fail(ctx, r, "restore of "+snap.Name+" failed: "+err.Error())
			return err
		}
		return nil
	})
}

// identity is what a restored copy must be told about itself.
func (cp *ControlPlane) identity(s Sandbox) *node.Identity {
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
	return &node.Identity{AccessToken: s.AccessToken, Env: env, Info: info}
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

// snapshotVolumes lists every snapshot's volume, so a sweep spares them.
func (cp *ControlPlane) snapshotVolumes() map[string]bool {
	out := map[string]bool{}
	all, _ := store.All[Snapshot](cp.cfg.Store, snapshotBucket)
	for _, s := range all {
		out[s.Volume] = true
	}
	return out
}
