package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/pkg/apiv1"
)

// require fails with a StateError unless the sandbox is in one of states.
func (cp *ControlPlane) require(r *record, want string, states ...string) error {
	s := cp.snapshot(r)
	for _, st := range states {
		if s.State == st {
			return nil
		}
	}
	return &StateError{ID: r.ID, State: s.State, Want: want}
}

// step moves r through the intermediate state via while act runs: on to
// (with reason, and the changes in also) when it succeeds, back where it
// was when it fails.
func (cp *ControlPlane) step(r *record, via, to, reason string, act func() error, also ...func(*Sandbox)) error {
	from := cp.snapshot(r).State
	if err := cp.setState(r, via, ""); err != nil {
		return err
	}
	if err := act(); err != nil {
		if serr := cp.setState(r, from, fmt.Sprintf("%s failed: %v", via, err)); serr != nil {
			cp.log.Error("roll back state", "sandbox", r.ID, "err", serr)
		}
		return err
	}
	return cp.setState(r, to, reason, also...)
}

// locked looks up a sandbox and holds its lifecycle lock while fn runs.
func (cp *ControlPlane) locked(id string, fn func(r *record) error) (Sandbox, error) {
	r, err := cp.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	cp.touch(id)
	r.lock.Lock()
	defer r.lock.Unlock()
	err = fn(r)
	return cp.snapshot(r), err
}

func (cp *ControlPlane) limits(s Sandbox) runtime.Limits {
	return cp.poolLimits(s.VCPUs, s.MemoryMB, s.DiskMB).Limits
}

// Checkpoint images are named on the node by what they belong to: a
// sandbox's suspend image, its snapshots' and its branches' captures.
func suspendImage(id string) string           { return id + "/suspend" }
func snapshotImage(id, snapID string) string  { return id + "/snapshots/" + snapID }
func branchImage(id, captureID string) string { return id + "/branches/" + captureID }

// removeImage deletes a checkpoint image on node n; "" is none.
func (cp *ControlPlane) removeImage(ctx context.Context, n Node, image string) error {
	if image == "" {
		return nil
	}
	return n.DeleteImage(context.WithoutCancel(ctx), image)
}

// imageComplete reports whether node n holds the whole image; a node
// that cannot tell is taken to hold none.
func (cp *ControlPlane) imageComplete(ctx context.Context, n Node, image string) bool {
	if image == "" {
		return false
	}
	info, err := n.Image(ctx, image)
	if err != nil {
		cp.log.Warn("look up image", "image", image, "err", err)
		return false
	}
	return info.Complete
}

// Pause freezes a running sandbox's processes; memory stays resident.
func (cp *ControlPlane) Pause(ctx context.Context, id string) (Sandbox, error) {
	return cp.locked(id, func(r *record) error {
		if err := cp.require(r, "pause", apiv1.StateRunning); err != nil {
			return err
		}
		n, err := cp.nodeFor(r)
		if err != nil {
			return err
		}
		return cp.step(r, apiv1.StatePausing, apiv1.StatePaused, "", func() error { return n.Pause(ctx, id) })
	})
}

// Resume continues a paused sandbox, or restores a suspended one.
func (cp *ControlPlane) Resume(ctx context.Context, id string) (Sandbox, error) {
	return cp.locked(id, func(r *record) error { return cp.resume(ctx, r) })
}

// resume is Resume with r.lock held.
func (cp *ControlPlane) resume(ctx context.Context, r *record) error {
	if err := cp.require(r, "resume", apiv1.StatePaused, apiv1.StateSuspended); err != nil {
		return err
	}
	s := cp.snapshot(r)
	n, err := cp.nodeOf(s)
	if err != nil {
		return err
	}
	if s.State == apiv1.StatePaused {
		return cp.step(r, apiv1.StateResuming, apiv1.StateRunning, "", func() error { return n.Resume(ctx, r.ID) })
	}
	if s.DiskOnly {
		return cp.resumeFromDisk(ctx, r, n)
	}
	cp.touch(r.ID)
	err = cp.step(r, apiv1.StateResuming, apiv1.StateRunning, "", func() error {
		if s.Image == "" {
			// A record of an earlier version whose image was not found.
			return fmt.Errorf("resume %s: its suspend image is lost", s.ID)
		}
		err := n.ResumeFrom(ctx, nodeapi.RestoreSpec{
			ID: s.ID, Image: s.Image, Limits: cp.limits(s), DiskMB: s.DiskMB, AccessToken: s.AccessToken,
			Network: s.policy(), Mounts: nodeMounts(s.Mounts), Runtime: s.RuntimeName(),
		})
		if err == nil {
			crashpoint.Hit("resume-resumed")
		}
		return err
	}, func(s *Sandbox) {
		s.ExpiresAt = time.Now().UTC().Add(time.Duration(s.TimeoutS) * time.Second)
		// The image describes the past now; recovering from it after the
		// volume moved on would mix two moments.
		s.Image = ""
	})
	if err != nil {
		return err
	}
	if err := cp.removeImage(ctx, n, s.Image); err != nil {
		cp.log.Warn("remove used suspend image", "sandbox", s.ID, "err", err)
	}
	return nil
}

// Suspend checkpoints a sandbox to disk and releases its CPU and memory.
func (cp *ControlPlane) Suspend(ctx context.Context, id string) (Sandbox, error) {
	return cp.locked(id, func(r *record) error { return cp.suspend(ctx, r, "") })
}

// suspend is Suspend with r.lock held; reason says why (idle, timeout).
func (cp *ControlPlane) suspend(ctx context.Context, r *record, reason string) error {
	if err := cp.require(r, "suspend", apiv1.StateRunning, apiv1.StatePaused); err != nil {
		return err
	}
	n, err := cp.nodeFor(r)
	if err != nil {
		return err
	}
	image := suspendImage(r.ID)
	// The image is recorded before the checkpoint starts so that recovery
	// knows where to look whatever moment a crash hits.
	if err := cp.update(r, func(s *Sandbox) { s.Image = image }); err != nil {
		return err
	}
	return cp.step(r, apiv1.StateSuspending, apiv1.StateSuspended, reason, func() error {
		return n.Suspend(ctx, r.ID, image)
	}, func(s *Sandbox) {
		now := time.Now().UTC()
		s.SuspendedAt = &now
	})
}

// touch records activity on a sandbox (for idle suspend).
func (cp *ControlPlane) touch(id string) {
	cp.mu.Lock()
	cp.lastActive[id] = time.Now()
	cp.mu.Unlock()
}

// activity is the node's report that a sandbox's processes produced output.
// Pooled sandboxes nobody claimed yet are not tracked.
func (cp *ControlPlane) activity(id string) {
	cp.mu.Lock()
	if _, ok := cp.sandboxes[id]; ok {
		cp.lastActive[id] = time.Now()
	}
	cp.mu.Unlock()
}

// died is node's report that a sandbox's runtime died on its own, for
// instance killed by the host for exceeding its memory limit. The sandbox
// is failed with the reason and its resources released.
func (cp *ControlPlane) died(node, id, reason string) {
	r, err := cp.lookup(id)
	if err != nil || !cp.sameNode(cp.snapshot(r).Node, node) {
		return
	}
	go func() {
		r.lock.Lock()
		defer r.lock.Unlock()
		switch cp.snapshot(r).State {
		case apiv1.StateRunning, apiv1.StatePaused:
			cp.fail(context.Background(), r, "the sandbox died: "+reason)
		}
	}()
}
