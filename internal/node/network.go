package node

import (
	"context"
	"fmt"

	"github.com/space-platform/space/internal/network"
)

// applyNetwork gives a slot its uplink and egress rules. Without an egress
// configuration sandboxes stay as the slot alone leaves them: reachable by
// the node, with no way out.
func (n *Node) applyNetwork(slot *network.Slot, p network.Policy) error {
	if n.cfg.Egress == nil {
		return nil
	}
	if err := n.cfg.Egress.Apply(slot, p); err != nil {
		return fmt.Errorf("network policy: %w", err)
	}
	// After the rules: loading them empties the set of addresses DNS
	// answers opened, which the gateway refills for the new policy.
	if n.cfg.Gateway != nil {
		if err := n.cfg.Gateway.Apply(slot, p); err != nil {
			return fmt.Errorf("network policy: %w", err)
		}
	}
	return nil
}

// destroySlot stops the slot's gateway services, whose sockets would
// otherwise keep its gateway namespace alive, and removes the slot.
func (n *Node) destroySlot(slot *network.Slot) error {
	if n.cfg.Gateway != nil {
		n.cfg.Gateway.Release(slot.Name)
	}
	if n.cfg.Egress != nil {
		n.cfg.Egress.Forget(slot.Name)
	}
	return slot.Destroy()
}

// SetNetwork replaces the egress policy of a sandbox whose slot exists
// (running or paused); new connections follow it at once, established ones
// are left alone.
func (n *Node) SetNetwork(ctx context.Context, id string, p network.Policy) error {
	if err := checkID(id); err != nil {
		return err
	}
	if n.cfg.Egress == nil {
		return ErrNoEgress
	}
	slot := n.cfg.Namespaces.Slot(id)
	if !slot.Exists() {
		return fmt.Errorf("set network of %s: %w", id, ErrNoSandbox)
	}
	return n.applyNetwork(slot, p)
}
