package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// completeMarker is written into a checkpoint image directory once the
// image is whole, so recovery can tell a finished image from a torn one.
const completeMarker = "space-complete"

// imageComplete reports whether dir holds a finished checkpoint image.
func imageComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, completeMarker))
	return err == nil
}

func markComplete(dir string) error {
	return writeFileSync(filepath.Join(dir, completeMarker), nil)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Reconcile settles a sandbox after a crash, from what the control
// plane's record says of it, with this node's steps in the contract's
// one order (nodeapi.Reconcile).
func (n *Node) Reconcile(ctx context.Context, req nodeapi.ReconcileRequest) (nodeapi.ReconcileResult, error) {
	if err := checkID(req.ID); err != nil {
		return nodeapi.ReconcileResult{}, err
	}
	if req.Image != "" {
		if _, err := n.imagePath(req.Image); err != nil {
			return nodeapi.ReconcileResult{}, err
		}
	}
	return nodeapi.Reconcile(ctx, n, req)
}

// Quiesce waits (a bounded time) for runtime commands on the sandbox that a
// crashed server left running, so recovery sees their outcome. An error
// says they still run.
func (n *Node) Quiesce(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.rt(id).Quiesce(qctx, id); err != nil {
		return fmt.Errorf("quiesce %s: runtime commands still running: %w", id, err)
	}
	return nil
}

// SettleCheckpoint decides, after a crash during a suspend, whether the
// suspend image is whole. A checkpoint command may have outlived the
// server, so it waits for that first. Images are written under another
// name and renamed into place only when whole (see saveImage), so a torn
// one is never taken for finished.
func (n *Node) SettleCheckpoint(ctx context.Context, id, image string) (bool, error) {
	dir, err := n.imagePath(image)
	if err != nil {
		return false, err
	}
	if err := n.Quiesce(ctx, id); err != nil {
		if errors.Is(err, nodeapi.ErrInvalidName) {
			return false, err
		}
		n.log.Warn("settle checkpoint", "sandbox", id, "err", err)
	}
	return imageComplete(dir), nil
}

// saveImage checkpoints the sandbox into imageDir, leaving it running (or
// frozen, if it was). The image is written to a scratch directory and moved
// into place only once complete, and the sandbox is never stopped by the
// checkpoint itself: a crash at any point leaves either a whole image or a
// sandbox that still runs.
func (n *Node) saveImage(ctx context.Context, id, imageDir string) error {
	partial := imageDir + ".partial"
	for _, dir := range []string{partial, imageDir} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := n.rt(id).Checkpoint(ctx, id, partial, true); err != nil {
		_ = os.RemoveAll(partial)
		if errors.Is(err, runtime.ErrUnsupported) {
			return noCheckpoint(id, err)
		}
		return err
	}
	if err := n.stampImageRuntime(partial, id); err != nil {
		_ = os.RemoveAll(partial)
		return err
	}
	// Before the marker: a complete image always names its agent.
	if err := n.stampImage(partial, n.sandboxAgent(id)); err != nil {
		_ = os.RemoveAll(partial)
		return err
	}
	if err := markComplete(partial); err != nil {
		return err
	}
	if err := os.Rename(partial, imageDir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(imageDir))
}

// Pause freezes every process of the sandbox; its memory stays resident.
func (n *Node) Pause(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := n.rt(id).Pause(ctx, id); err != nil {
		return fmt.Errorf("pause %s: %w", id, err)
	}
	return nil
}

// Resume thaws a paused sandbox.
func (n *Node) Resume(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := n.rt(id).Resume(ctx, id); err != nil {
		return fmt.Errorf("resume %s: %w", id, err)
	}
	return nil
}

// Paused reports whether the runtime holds the sandbox frozen; a sandbox
// the runtime does not know is not.
func (n *Node) Paused(ctx context.Context, id string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	st, err := n.rt(id).State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state of %s: %w", id, err)
	}
	return st.Status == runtime.StatusPaused, nil
}

// paused is Paused for the node's own steps, which treat "cannot tell" as
// "not frozen": they freeze the sandbox themselves then.
func (n *Node) paused(ctx context.Context, id string) bool {
	p, err := n.Paused(ctx, id)
	return err == nil && p
}

// Suspend saves the sandbox's memory and process state to the image and
// releases its CPU, memory and network slot. The root volume stays on disk;
// together with the image it is the sandbox's durable state. The node keeps
// its sessions, which continue after ResumeFrom.
func (n *Node) Suspend(ctx context.Context, id, image string) error {
	if err := checkID(id); err != nil {
		return err
	}
	imageDir, err := n.imagePath(image)
	if err != nil {
		return err
	}
	rt := n.rt(id)
	wasPaused := n.paused(ctx, id)
	if !wasPaused {
		// Freeze first so the image and the volume describe one instant.
		if err := rt.Pause(ctx, id); err != nil {
			return fmt.Errorf("suspend %s: %w", id, err)
		}
	}
	if err := n.saveImage(ctx, id, imageDir); err != nil {
		if !wasPaused {
			_ = rt.Resume(context.WithoutCancel(ctx), id)
		}
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	crashpoint.Hit("suspend-checkpointed")
	n.releaseRuntime(ctx, id)
	if sb, err := n.lookup(id); err == nil {
		sb.setSuspendImage(image)
	}
	return nil
}

// Halt stops a sandbox's runtime and frees its network slot; its volume and
// sessions stay (a restore in place follows).
func (n *Node) Halt(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer n.lifecycle.lock(id)()
	n.releaseRuntime(ctx, id)
	return nil
}

// DeleteVolume removes a volume (a snapshot's filesystem, a root volume a
// failed start left); a missing one is not an error.
func (n *Node) DeleteVolume(_ context.Context, name string) error {
	if err := nodeapi.ValidName(name); err != nil {
		return err
	}
	if err := n.cfg.Volumes.Delete(name); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// Volumes lists the volumes (and directories of volumes) directly under
// prefix, such as "snapshots" or "snapshots/<id>".
func (n *Node) Volumes(_ context.Context, prefix string) ([]string, error) {
	if err := nodeapi.ValidName(prefix); err != nil {
		return nil, err
	}
	vols, err := n.cfg.Volumes.List(prefix)
	if err != nil {
		return nil, fmt.Errorf("list volumes %s: %w", prefix, err)
	}
	return vols, nil
}

// VolumeExists reports whether a volume is present.
func (n *Node) VolumeExists(_ context.Context, name string) (bool, error) {
	if err := nodeapi.ValidName(name); err != nil {
		return false, err
	}
	return n.cfg.Volumes.Exists(name), nil
}

// releaseRuntime stops the runtime and removes the slot but keeps the
// volume and the node's handle (with its sessions).
func (n *Node) releaseRuntime(ctx context.Context, id string) {
	n.untrack(id)
	n.uncommit(id)
	if err := n.rt(id).Destroy(ctx, id); err != nil {
		n.log.Warn("release runtime", "sandbox", id, "err", err)
	}
	if err := n.destroySlot(n.cfg.Namespaces.Slot(id)); err != nil {
		n.log.Warn("release network slot", "sandbox", id, "err", err)
	}
	if sb, err := n.lookup(id); err == nil {
		sb.closePortConns()
		sb.Agent.Reset()
	}
}

// Capture records the running sandbox's filesystem as the read-only volume
// req.Volume and its memory as the checkpoint image req.Image, both taken
// while the sandbox is frozen, and lets it continue. It is the first half
// of a snapshot or a branch.
func (n *Node) Capture(ctx context.Context, req nodeapi.CaptureRequest) error {
	if err := checkID(req.ID); err != nil {
		return err
	}
	if err := nodeapi.ValidName(req.Volume); err != nil {
		return err
	}
	dir, err := n.imagePath(req.Image)
	if err != nil {
		return err
	}
	return n.capture(ctx, req.ID, req.Volume, dir)
}

// capture is Capture into an image directory (a checkpoint image's, or a
// template image's).
func (n *Node) capture(ctx context.Context, id, volume, imageDir string) error {
	rt := n.rt(id)
	wasPaused := n.paused(ctx, id)
	if _, block := rt.(runtime.BlockRootfs); block && !wasPaused {
		n.syncGuest(ctx, id)
	}
	if !wasPaused {
		if err := rt.Pause(ctx, id); err != nil {
			return fmt.Errorf("capture %s: %w", id, err)
		}
		defer func() {
			if err := rt.Resume(context.WithoutCancel(ctx), id); err != nil {
				n.log.Error("resume after capture", "sandbox", id, "err", err)
			}
		}()
	}
	if _, err := n.cfg.Volumes.Snapshot(volumeName(id), volume, true); err != nil {
		return fmt.Errorf("capture %s: filesystem: %w", id, err)
	}
	if err := n.saveImage(ctx, id, imageDir); err != nil {
		_ = n.cfg.Volumes.Delete(volume)
		return fmt.Errorf("capture %s: memory: %w", id, err)
	}
	return nil
}

// guestSyncTimeout bounds the sync inside a guest before a capture.
const guestSyncTimeout = 30 * time.Second

// guestFlush is syncGuest's script: the freeze and the thaw follow each
// other in one shell, whose binaries are in memory by then (a frozen
// filesystem still reads); a guest without fsfreeze gets the sync alone.
// The long options are the ones both util-linux and busybox take.
const guestFlush = `sync; if command -v fsfreeze >/dev/null 2>&1; then fsfreeze --freeze / && fsfreeze --unfreeze /; fi`

// syncGuest writes a guest's cached file data and metadata to its disk
// image: a sandbox with a kernel of its own keeps recent writes in its
// page cache and journal, where the captured volume, read on the host
// (ReadVolumeFile), would not see them. A sync commits them to the
// journal only; the reader (debugfs) does not replay a journal, and the
// kernel checkpoints it to the filesystem's own blocks when it likes (a
// file written just before was then missing from the snapshot's reads),
// so the root filesystem is also frozen and thawed, which checkpoints
// the whole journal. The capture is consistent with the memory image
// either way, so a failure is only logged.
func (n *Node) syncGuest(ctx context.Context, id string) {
	sb, err := n.lookup(id)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, guestSyncTimeout)
	defer cancel()
	res, err := sb.Exec(ctx, ExecSpec{Cmd: []string{"/bin/sh", "-c", guestFlush}, User: "root", Timeout: guestSyncTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("sync exited %d", res.ExitCode)
	}
	if err != nil {
		n.log.Warn("sync a guest's disk before a capture", "sandbox", id, "err", err)
	}
}

// The contract's values for restores.
type (
	Identity    = nodeapi.Identity
	RestoreSpec = nodeapi.RestoreSpec
)

// ResumeFrom restores a sandbox from a checkpoint image. Processes continue
// where they were; the node reconnects to them and to their sessions.
//
// With FromVolume and Rollback (a restore in place) the sandbox's root
// volume is never deleted before the restored runtime runs: the new volume
// is staged, the current one is set aside as the previous volume, and a
// failure puts it back. The caller drops the previous volume with
// CommitRestore once it has recorded the restore, and RevertRestore undoes
// one that a crash interrupted.
func (n *Node) ResumeFrom(ctx context.Context, spec RestoreSpec) error {
	if err := checkID(spec.ID); err != nil {
		return err
	}
	defer n.lifecycle.lock(spec.ID)()
	if spec.FromVolume != "" {
		if err := nodeapi.ValidName(spec.FromVolume); err != nil {
			return err
		}
	}
	dir, err := n.imagePath(spec.Image)
	if err != nil {
		return err
	}
	return n.resumeFrom(ctx, spec, dir)
}

// resumeFrom is ResumeFrom from an image directory (a checkpoint image's,
// or a template image's); spec.Image is not used.
func (n *Node) resumeFrom(ctx context.Context, spec RestoreSpec, imageDir string) (err error) {
	// Counted from now on (a resume, a branch, a pool refill), so
	// placement sees a restore in flight.
	n.commit(spec.ID, spec.Limits)
	defer func() {
		if err != nil {
			n.uncommit(spec.ID)
		}
	}()
	// The backend that took the image restores it, and no other.
	rtName, backend, err := n.restoreBackend(imageDir, spec.Runtime)
	if err != nil {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	vol := volumeName(spec.ID)
	if spec.FromVolume != "" && spec.Rollback {
		if err := n.stageVolume(backend, spec); err != nil {
			return err
		}
		if err := n.swapIn(spec.ID); err != nil {
			return err
		}
		crashpoint.Hit("restore-swapped")
		defer func() {
			if err != nil {
				n.releaseRuntime(context.WithoutCancel(ctx), spec.ID)
				if _, rerr := n.RevertRestore(context.WithoutCancel(ctx), spec.ID); rerr != nil {
					n.log.Error("put back the root volume after a failed restore", "sandbox", spec.ID, "err", rerr)
				}
			}
		}()
	} else if spec.FromVolume != "" {
		// A new sandbox (branch, from a snapshot): whatever is at its
		// volume's name is a leftover of an earlier attempt.
		if err := n.cfg.Volumes.Delete(vol); err != nil {
			return fmt.Errorf("restore %s: %w", spec.ID, err)
		}
		if _, err := n.cfg.Volumes.Snapshot(spec.FromVolume, vol, false); err != nil {
			return fmt.Errorf("restore %s: root volume: %w", spec.ID, err)
		}
		if err := n.setDiskLimit(backend, vol, spec.DiskMB); err != nil {
			return fmt.Errorf("restore %s: %w", spec.ID, err)
		}
		crashpoint.Hit("copy-volume")
	}
	if !n.cfg.Volumes.Exists(vol) {
		return fmt.Errorf("restore %s: root volume is missing", spec.ID)
	}
	// The agent the image's memory holds, not the node's current one.
	agent, guessed, err := n.imageAgent(spec.ID, imageDir)
	if err != nil {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	binds, err := n.runtimeMounts(backend, vol, spec.Mounts)
	if err != nil {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	slot := n.cfg.Namespaces.Slot(spec.ID)
	if !slot.Exists() {
		if slot, err = n.cfg.Namespaces.Create(spec.ID); err != nil {
			return err
		}
	}
	if err := n.applyNetwork(slot, spec.Network); err != nil {
		_ = n.destroySlot(slot)
		return err
	}
	rs := runtime.Spec{
		ID: spec.ID, Rootfs: n.rootfs(backend, vol, spec.DiskMB), Network: slot,
		Agent: n.agents.binary(agent), Hostname: spec.ID, Limits: spec.Limits,
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Mounts: binds,
	}
	if err := n.recordRuntime(spec.ID, rtName); err != nil {
		_ = n.destroySlot(slot)
		return err
	}
	if err := backend.Restore(ctx, rs, imageDir); err != nil {
		_ = n.destroySlot(slot)
		return err
	}
	sb, err := n.lookup(spec.ID)
	// A sandbox this node has no handle of was suspended elsewhere (or
	// before a restart): its sessions are those its image carries.
	fresh := err != nil
	if fresh {
		sb = n.newSandbox(spec.ID, spec.AccessToken)
	} else {
		sb.Agent.setToken(spec.AccessToken)
		sb.Agent.Reset()
		sb.setSuspendImage("")
	}
	sb.setAgent(agent)
	readyCtx, cancel := context.WithTimeout(ctx, agentStartTimeout)
	defer cancel()
	if err := n.waitStarted(readyCtx, sb); err != nil {
		n.releaseRuntime(ctx, spec.ID)
		if guessed {
			return fmt.Errorf("restore %s: the image is older than agent digests and was restored with agent %.12s, which may not be the agent it was taken with: %w", spec.ID, agent, err)
		}
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	if id := spec.NewIdentity; id != nil {
		if err := sb.rekey(readyCtx, *id); err != nil {
			n.releaseRuntime(ctx, spec.ID)
			return fmt.Errorf("restore %s: %w", spec.ID, err)
		}
	} else if err := sb.reseed(readyCtx); err != nil {
		n.log.Warn("reseed after restore", "sandbox", spec.ID, "err", err)
	}
	if spec.Rollback {
		sb.dropSessions("rolled back to a snapshot")
	} else if fresh && spec.NewIdentity == nil {
		// Before adoptProcesses, which would follow the same processes
		// with empty journals.
		if err := sb.importSessions(imageDir); err != nil {
			n.log.Warn("restore sessions from the image", "sandbox", spec.ID, "err", err)
		}
	}
	n.register(sb)
	n.track(ctx, sb)
	sb.adoptProcesses(ctx)
	return nil
}

// Volumes of a restore in place besides the root volume: the staged copy of
// the snapshot, and the root volume it replaced, kept until the restore is
// recorded.
func stagedVolumeName(id string) string   { return path.Join("restoring", id) }
func previousVolumeName(id string) string { return path.Join("previous", id) }

// stageVolume makes the writable copy of the snapshot that a restore in
// place will swap in, with the sandbox's disk limit. Nothing of the
// sandbox is touched yet.
func (n *Node) stageVolume(backend runtime.Runtime, spec RestoreSpec) error {
	staged := stagedVolumeName(spec.ID)
	if err := n.cfg.Volumes.Delete(staged); err != nil {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	if _, err := n.cfg.Volumes.Snapshot(spec.FromVolume, staged, false); err != nil {
		return fmt.Errorf("restore %s: root volume: %w", spec.ID, err)
	}
	if err := n.setDiskLimit(backend, staged, spec.DiskMB); err != nil {
		_ = n.cfg.Volumes.Delete(staged)
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	return nil
}

func (n *Node) setDiskLimit(backend runtime.Runtime, vol string, diskMB int) error {
	if diskMB <= 0 {
		return nil
	}
	if _, block := backend.(runtime.BlockRootfs); block {
		return n.cfg.Volumes.SetWriteLimit(vol, diskLimitBytes(backend, diskMB))
	}
	return n.cfg.Volumes.SetLimit(vol, diskLimitBytes(backend, diskMB))
}

// diskLimitBytes is the limit of a root volume for a sandbox of diskMB.
// A backend that boots a disk image has its disk grown to diskMB
// (Rootfs.Bytes), so that the guest's own filesystem says "no space left"
// at the sandbox's limit; the volume's limit sits above that, by what the
// filesystem's metadata and btrfs's copy-on-write of partly rewritten
// extents may add, so that it bounds the host's bytes without tripping
// first: a write the host refuses is an I/O error to the guest, which
// aborts its filesystem's journal.
func diskLimitBytes(backend runtime.Runtime, diskMB int) int64 {
	limit := int64(diskMB) << 20
	if _, block := backend.(runtime.BlockRootfs); block {
		limit += limit/8 + 64<<20
	}
	return limit
}

// swapIn sets the root volume aside as the previous volume and moves the
// staged one into its place. Each rename is atomic and made durable, so a
// crash leaves one of three layouts RevertRestore knows how to undo.
func (n *Node) swapIn(id string) error {
	vol, prev := volumeName(id), previousVolumeName(id)
	if err := n.cfg.Volumes.Delete(prev); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if err := n.renameVolume(vol, prev); err != nil {
		_ = n.cfg.Volumes.Delete(stagedVolumeName(id))
		return fmt.Errorf("restore %s: set the root volume aside: %w", id, err)
	}
	if err := n.renameVolume(stagedVolumeName(id), vol); err != nil {
		if _, rerr := n.RevertRestore(context.Background(), id); rerr != nil {
			n.log.Error("put back the root volume", "sandbox", id, "err", rerr)
		}
		return fmt.Errorf("restore %s: swap in the snapshot's volume: %w", id, err)
	}
	return nil
}

func (n *Node) renameVolume(from, to string) error {
	if err := n.cfg.Volumes.Rename(from, to); err != nil {
		return err
	}
	for _, v := range []string{from, to} {
		if err := syncDir(filepath.Dir(n.cfg.Volumes.Path(v))); err != nil {
			return err
		}
	}
	return nil
}

// RevertRestore undoes a restore in place that did not finish: the staged
// volume is removed and, if the root volume had already been swapped, the
// runtime running on the new one is stopped and the previous root volume
// put back. It reports whether a swap was undone (the sandbox's runtime is
// then gone). It is a no-op for a sandbox with no restore in progress.
func (n *Node) RevertRestore(ctx context.Context, id string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	vol, prev := volumeName(id), previousVolumeName(id)
	if err := n.cfg.Volumes.Delete(stagedVolumeName(id)); err != nil {
		return false, fmt.Errorf("revert restore of %s: %w", id, err)
	}
	if !n.cfg.Volumes.Exists(prev) {
		return false, nil
	}
	n.releaseRuntime(ctx, id)
	if err := n.cfg.Volumes.Delete(vol); err != nil {
		return true, fmt.Errorf("revert restore of %s: %w", id, err)
	}
	if err := n.renameVolume(prev, vol); err != nil {
		return true, fmt.Errorf("revert restore of %s: %w", id, err)
	}
	return true, nil
}

// CommitRestore removes what a finished restore in place kept for a
// rollback (the previous root volume, a staged volume); the caller has
// recorded the restore.
func (n *Node) CommitRestore(_ context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	var errs []error
	for _, v := range []string{previousVolumeName(id), stagedVolumeName(id)} {
		if err := n.cfg.Volumes.Delete(v); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commit restore of %s: %w", id, err)
	}
	return nil
}

// rekey gives a restored copy its own token, entropy, hostname and identity
// file.
func (sb *Sandbox) rekey(ctx context.Context, id Identity) error {
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	return sb.Agent.init(ctx, agentInit{
		AccessToken: id.AccessToken, EnvVars: id.Env, Hostname: sb.ID,
		Entropy: entropy, Timestamp: time.Now().UTC(), Identity: id.Info,
	})
}

// reseed gives a sandbox restored in place fresh entropy and the current time.
func (sb *Sandbox) reseed(ctx context.Context) error {
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	token := *sb.Agent.token.Load()
	return sb.Agent.init(ctx, agentInit{AccessToken: token, Entropy: entropy, Timestamp: time.Now().UTC()})
}

// BootFromDisk starts a sandbox again on its existing root volume, without
// memory: what remains of a running sandbox after the host went down.
func (n *Node) BootFromDisk(ctx context.Context, spec CreateSpec) error {
	if err := checkCreateSpec(spec); err != nil {
		return err
	}
	defer n.lifecycle.lock(spec.ID)()
	vol := volumeName(spec.ID)
	if !n.cfg.Volumes.Exists(vol) {
		return fmt.Errorf("boot %s from disk: root volume is missing", spec.ID)
	}
	_ = n.rt(spec.ID).Destroy(ctx, spec.ID)
	n.commit(spec.ID, spec.Limits)
	if err := n.boot(ctx, spec); err != nil {
		n.uncommit(spec.ID)
		return err
	}
	return nil
}

// noCheckpoint is a backend's refusal to checkpoint (runtime.ErrUnsupported)
// as the node's callers see it: nodeapi.ErrNoCheckpoint, here and across
// the wire, with the backend's sentence for a client to read.
func noCheckpoint(id string, err error) error {
	reason := "the runtime of sandbox " + id + " cannot checkpoint it"
	var ue *runtime.UnsupportedError
	if errors.As(err, &ue) {
		reason = ue.Reason
	}
	return fmt.Errorf("%s (%w)", reason, nodeapi.ErrNoCheckpoint)
}
