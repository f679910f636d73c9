package controlplane

import (
	"context"
	"fmt"

	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// Recover loads the persisted sandboxes after a (re)start and reconciles
// them with what the node still runs: running sandboxes whose runtime
// survived are adopted; a start that was interrupted is rolled back as
// failed; anything on the node that no sandbox owns is removed.
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
		switch s.State {
		case apiv1.StateRunning:
			ok, err := cp.cfg.Node.Adopt(ctx, s.ID, s.AccessToken)
			if err != nil || !ok {
				cp.log.Warn("running sandbox did not survive the restart", "sandbox", s.ID, "err", err)
				cp.fail(ctx, r, "runtime lost while the server was down")
				continue
			}
			cp.recordEvent(s.ID, Event{Type: "adopted", Message: "re-adopted after server restart"})
		case apiv1.StateStarting:
			cp.fail(ctx, r, "start interrupted by a server restart")
		case apiv1.StateStopping:
			if err := cp.cfg.Node.Destroy(ctx, s.ID); err != nil {
				cp.log.Error("finish stop", "sandbox", s.ID, "err", err)
			}
			_ = cp.setState(r, apiv1.StateStopped, s.Reason)
		}
	}
	return cp.cfg.Node.Sweep(ctx, func(id string) bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		r, ok := cp.sandboxes[id]
		return ok && !terminal(r.State)
	})
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
