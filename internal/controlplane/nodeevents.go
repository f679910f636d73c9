package controlplane

import (
	"context"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
)

// resubscribeDelay is how long the control plane waits before it
// subscribes again to a node's events after the stream broke.
const resubscribeDelay = time.Second

// followNodes follows every node that joins until ctx ends: a node joining
// (or registering again) is reconciled, unless Recover just did so, and
// its pools are set, and its events are followed by a goroutine of its own,
// which a later join of the node replaces.
func (cp *ControlPlane) followNodes(ctx context.Context) {
	for id := range cp.cfg.Nodes.Joins(ctx) {
		cp.fleet.join(id)
		nctx, cancel := context.WithCancel(ctx)
		cp.fleet.follow(id, cancel)
		go func() {
			// The local node was reconciled by Recover, just before: not
			// again, which would adopt its sandboxes' runtimes anew under
			// the calls that reach them by then. Its pools are set now,
			// with the templates it built before it joined.
			if !cp.fleet.takeReconciled(id) {
				if err := cp.ReconcileNode(nctx, id); err != nil {
					cp.log.Error("reconcile node", "node", id, "err", err)
				}
			}
			cp.applyPools(nctx)
			cp.followNode(nctx, id)
		}()
	}
}

// followNode consumes node id's events until ctx ends or the node is lost,
// subscribing again whenever the stream closes: activity feeds idle
// suspend, an exit fails the sandbox, a denial goes into its event history.
func (cp *ControlPlane) followNode(ctx context.Context, id string) {
	for {
		if n, err := cp.node(id, ""); err != nil {
			cp.log.Warn("subscribe to node events", "node", id, "err", err)
		} else if ch, err := n.Events(ctx); err != nil {
			cp.log.Warn("subscribe to node events", "node", id, "err", err)
		} else {
			for ev := range ch {
				cp.nodeEvent(id, ev)
			}
		}
		if cp.cfg.Nodes.State(id) == cluster.Lost {
			return // its sandboxes are written off; a join starts again
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(resubscribeDelay):
		}
	}
}

// nodeEvent handles an event of node id; an event about a sandbox that is
// not on that node is ignored.
func (cp *ControlPlane) nodeEvent(id string, ev nodeapi.Event) {
	switch ev.Type {
	case nodeapi.EventActivity:
		cp.activity(ev.Sandbox)
	case nodeapi.EventExit:
		cp.died(id, ev.Sandbox, ev.Reason)
	case nodeapi.EventNetworkDenied:
		cp.networkDenied(ev.Sandbox, ev.Reason)
	case nodeapi.EventPool:
		// The pools' stock is read when asked for (PoolStatus); placement
		// reads it from the nodes' heartbeats.
	}
}
