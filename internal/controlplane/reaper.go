package controlplane

import (
	"context"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Run enforces lifetimes until ctx ends: a sandbox past its expiry is
// stopped (reason "timeout"), and stopped or failed sandboxes are forgotten
// after the retention period.
func (cp *ControlPlane) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			cp.reap(ctx)
		}
	}
}

func (cp *ControlPlane) reap(ctx context.Context) {
	now := time.Now()
	cp.mu.Lock()
	var expired, stale []*record
	for _, r := range cp.sandboxes {
		switch {
		case terminal(r.State) && r.EndedAt != nil && now.Sub(*r.EndedAt) > cp.cfg.Defaults.Retention:
			stale = append(stale, r)
		case r.State == apiv1.StateRunning && now.After(r.ExpiresAt):
			expired = append(expired, r)
		}
	}
	cp.mu.Unlock()
	for _, r := range expired {
		if !r.lock.TryLock() {
			continue // busy; next tick
		}
		if s := cp.snapshot(r); s.State == apiv1.StateRunning && now.After(s.ExpiresAt) {
			if err := cp.stop(ctx, r, "timeout"); err != nil {
				cp.log.Error("stop expired sandbox", "sandbox", r.ID, "err", err)
			}
		}
		r.lock.Unlock()
	}
	for _, r := range stale {
		if err := cp.forget(r.ID); err != nil {
			cp.log.Error("forget sandbox", "sandbox", r.ID, "err", err)
		}
	}
}
