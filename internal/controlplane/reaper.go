package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// Run enforces lifetimes until ctx ends (see docs/lifecycle.md):
//   - a running or paused sandbox past its expiry is stopped, or suspended
//     when its on_timeout is "suspend";
//   - a running sandbox without activity for idle_suspend_s is suspended;
//   - a suspended sandbox older than the suspended retention is deleted;
//   - rolling snapshots are taken on their interval and pruned after their
//     retention;
//   - stopped or failed sandboxes are forgotten after the retention period.
//
// It also follows the nodes and their events (nodeevents.go) meanwhile.
//
// On a store shared by several replicas (replicas.go) Run also keeps the
// cache in step with the store and renews this replica's liveness lease;
// the loops above run only while it holds the leader lease, so exactly
// once across the cluster, and the leader also finishes the transitions
// of replicas that died. With bbolt this process simply leads.
func (cp *ControlPlane) Run(ctx context.Context) {
	if cp.shared {
		go cp.followStore(ctx)
		go cp.shareActivity(ctx)
		go cp.lease(ctx, "replica/"+cp.replicaID, &cp.alive, nil)
		go cp.lease(ctx, leaderLease, &cp.leading, func(leads bool) {
			cp.log.Info("leader lease", "replica", cp.replicaID, "leading", leads)
		})
	} else {
		cp.alive.Store(true)
		cp.leading.Store(true)
		defer cp.leading.Store(false)
	}
	go cp.followNodes(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !cp.Leading() {
				continue
			}
			if cp.shared {
				cp.mergeActivity()
				cp.adoptOrphans(ctx)
			}
			cp.reap(ctx)
			if n%10 == 0 {
				cp.pruneSnapshots(time.Now())
			}
		}
	}
}

// chore is one piece of lifecycle work the reaper found.
type chore struct {
	r    *record
	what string
	node string // the record's node when the chore was found
}

func (cp *ControlPlane) reap(ctx context.Context) {
	now := time.Now()
	d := cp.cfg.Defaults
	var chores []chore
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		last, ok := cp.lastActive[r.ID]
		if !ok {
			cp.lastActive[r.ID] = now
			last = now
		}
		switch {
		case terminal(r.State) && r.EndedAt != nil && now.Sub(*r.EndedAt) > d.Retention:
			chores = append(chores, chore{r, "forget", r.Node})
		case (r.State == apiv1.StateRunning || r.State == apiv1.StatePaused) && now.After(r.ExpiresAt):
			chores = append(chores, chore{r, "timeout", r.Node})
		case r.State == apiv1.StateRunning && r.Lifecycle.IdleSuspendS > 0 &&
			now.Sub(last) > time.Duration(r.Lifecycle.IdleSuspendS)*time.Second:
			chores = append(chores, chore{r, "idle", r.Node})
		case r.State == apiv1.StateSuspended && d.SuspendedRetention > 0 && r.SuspendedAt != nil &&
			now.Sub(*r.SuspendedAt) > d.SuspendedRetention:
			chores = append(chores, chore{r, "expire", r.Node})
		case r.State == apiv1.StateRunning && r.Lifecycle.SnapshotIntervalS > 0 && snapshotDue(r.Sandbox, now):
			chores = append(chores, chore{r, "snapshot", r.Node})
		}
	}
	cp.mu.Unlock()
	ready := map[string]bool{} // whether a node answers, by a record's node
	for _, c := range chores {
		// A chore other than forgetting needs the sandbox's node; one that
		// does not answer would fail it every tick. It waits for the node
		// (the sandbox stays as it is, as its node_state says).
		if c.what != "forget" {
			up, seen := ready[c.node]
			if !seen {
				up = cp.nodeState(c.node) == string(cluster.Ready)
				ready[c.node] = up
			}
			if !up {
				continue
			}
		}
		if c.what == "forget" {
			if err := cp.forget(c.r.ID); err != nil {
				cp.log.Error("forget sandbox", "sandbox", c.r.ID, "err", err)
			}
			continue
		}
		// Lifecycle chores run in the background so that one slow suspend
		// does not hold up the others; a busy sandbox waits a tick. The
		// lock (across replicas, with the record reloaded) is completed
		// in the background too, and doChore re-checks the state under it,
		// so a chore another replica made moot does nothing.
		if !c.r.lock.tryLocal() {
			continue
		}
		go func(c chore) {
			c.r.lock.lockShared()
			defer c.r.lock.Unlock()
			if err := cp.doChore(ctx, c); err != nil {
				cp.log.Error("lifecycle "+c.what, "sandbox", c.r.ID, "err", err)
			}
		}(c)
	}
}

func snapshotDue(s Sandbox, now time.Time) bool {
	last := s.LastSnapshotAt
	if last == nil {
		last = s.StartedAt
	}
	if t := s.SnapshotTriedAt; t != nil && (last == nil || t.After(*last)) {
		last = t
	}
	return last != nil && now.Sub(*last) >= time.Duration(s.Lifecycle.SnapshotIntervalS)*time.Second
}

// doChore runs one chore with c.r.lock held, re-checking the state first.
func (cp *ControlPlane) doChore(ctx context.Context, c chore) error {
	s := cp.snapshot(c.r)
	switch c.what {
	case "timeout":
		if s.State != apiv1.StateRunning && s.State != apiv1.StatePaused || !time.Now().After(s.ExpiresAt) {
			return nil
		}
		if s.Lifecycle.OnTimeout == "suspend" {
			return cp.suspendAsConfigured(ctx, c.r, "timeout")
		}
		return cp.stop(ctx, c.r, "timeout")
	case "idle":
		if s.State != apiv1.StateRunning {
			return nil
		}
		return cp.suspendAsConfigured(ctx, c.r, "idle")
	case "expire":
		if s.State != apiv1.StateSuspended {
			return nil
		}
		if err := cp.stop(ctx, c.r, "suspended retention expired"); err != nil {
			return err
		}
		return cp.forget(c.r.ID)
	case "snapshot":
		if s.State != apiv1.StateRunning {
			return nil
		}
		if _, err := cp.snapshot1(ctx, c.r, "", true); err != nil {
			cp.rollingSnapshotFailed(c.r, err)
			return err
		}
	}
	return nil
}

// rollingSnapshotFailed records a failed rolling snapshot, so that the next
// is tried an interval later, and tells the sandbox's events why in words
// a client may see (the error itself is logged by the caller).
func (cp *ControlPlane) rollingSnapshotFailed(r *record, err error) {
	now := time.Now().UTC()
	_ = cp.update(r, func(s *Sandbox) { s.SnapshotTriedAt = &now })
	why := "it failed"
	if errors.Is(err, nodeapi.ErrNoCheckpoint) {
		// A microVM with volumes mounted: QEMU saves no guest with a 9p
		// share, and the sandbox runs on untouched.
		why = "its runtime cannot save its memory while volumes are mounted"
	}
	cp.recordEvent(r.ID, Event{Type: "snapshot", Message: fmt.Sprintf("rolling snapshot not taken: %s; the next is tried in %d s",
		why, cp.snapshot(r).Lifecycle.SnapshotIntervalS)})
}
