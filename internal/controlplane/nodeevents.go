package controlplane

import (
	"context"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// resubscribeDelay is how long the control plane waits before it
// subscribes again to a node's events after the stream broke.
const resubscribeDelay = time.Second

// followNode consumes the node's events until ctx ends, subscribing again
// whenever the stream closes: activity feeds idle suspend, an exit fails
// the sandbox, a denial goes into its event history.
func (cp *ControlPlane) followNode(ctx context.Context) {
	for {
		ch, err := cp.cfg.Node.Events(ctx)
		if err != nil {
			cp.log.Warn("subscribe to node events", "err", err)
		} else {
			for ev := range ch {
				cp.nodeEvent(ev)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(resubscribeDelay):
		}
	}
}

func (cp *ControlPlane) nodeEvent(ev nodeapi.Event) {
	switch ev.Type {
	case nodeapi.EventActivity:
		cp.activity(ev.Sandbox)
	case nodeapi.EventExit:
		cp.died(ev.Sandbox, ev.Reason)
	case nodeapi.EventNetworkDenied:
		cp.networkDenied(ev.Sandbox, ev.Reason)
	case nodeapi.EventPool:
		// The pools' stock is read when asked for (PoolStatus); placement
		// across nodes will track it from these.
	}
}
