// Package nodeset is the set of nodes a cluster's control plane calls
// (controlplane.Nodes): the registry (cluster.Registry) says where each
// node is and whether it answers; each node is driven through a noderpc
// client dialed at the address it advertised or, when it runs in the
// control plane's process (one house's node), by calls. It also tells
// the control plane which nodes joined, and shows the operator's nodes
// routes an in-process node as it is now (OperatorView).
package nodeset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/noderpc"
)

// Set is how a cluster's control plane reaches its nodes
// (controlplane.Nodes): the registry says where each node is and whether
// it answers, and each node is driven through a noderpc client dialed at
// the address it advertised, or, when it runs in this process (serve's
// node, cluster.InProcessAddress), by calls.
type Set struct {
	reg           *cluster.Registry
	token, caFile string

	mu      sync.Mutex
	clients map[string]*remoteNode // by node id
	local   map[string]controlplane.Node
	joined  []string // ids joined through this replica, in order
	subs    map[*joinSub]struct{}
}

// joinSub is one Joins subscription.
type joinSub struct {
	ctx context.Context
	ch  chan string
	// sends counts deliveries in flight; the channel closes after them.
	sends sync.WaitGroup
}

// deliver sends id in the background (called under Set.mu), so
// that a subscriber busy reconciling holds no registration up.
func (s *joinSub) deliver(id string) {
	s.sends.Add(1)
	go func() {
		defer s.sends.Done()
		select {
		case s.ch <- id:
		case <-s.ctx.Done():
		}
	}()
}

var _ controlplane.Nodes = (*Set)(nil)

// New is the set of the nodes in reg, dialed with the cluster token and,
// when caFile is set, verified against its CA.
func New(reg *cluster.Registry, token, caFile string) *Set {
	return &Set{
		reg: reg, token: token, caFile: caFile,
		clients: map[string]*remoteNode{}, local: map[string]controlplane.Node{}, subs: map[*joinSub]struct{}{},
	}
}

// AddLocal makes n, which runs in this process, the node that registers
// as id at cluster.InProcessAddress(id).
func (c *Set) AddLocal(id string, n controlplane.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.local[id] = n
}

// InProcess returns the node registered as id at address when it runs in
// this process.
func (c *Set) InProcess(id, address string) (controlplane.Node, bool) {
	if address != cluster.InProcessAddress(id) {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.local[id]
	return n, ok
}

// remoteNode is a node reached over RPC, as the control plane drives it.
type remoteNode struct {
	*noderpc.Client
	address string
}

// client returns the node's client, dialing it at address when it has
// none or the node moved.
func (c *Set) client(id, address string) (controlplane.Node, error) {
	if address == cluster.InProcessAddress(id) {
		if n, ok := c.InProcess(id, address); ok {
			return n, nil
		}
		return nil, fmt.Errorf("node %s: registered as in-process, but it runs in no process of this control plane", id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rn, ok := c.clients[id]; ok && rn.address == address {
		return rn, nil
	}
	cl, err := noderpc.Dial(address, c.token, noderpc.DialOptions{
		CAFile: c.caFile, Name: id, Unavailable: controlplane.ErrNodeUnavailable,
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	if old, ok := c.clients[id]; ok {
		_ = old.Close()
	}
	rn := &remoteNode{Client: cl, address: address}
	c.clients[id] = rn
	return rn, nil
}

// Join is told of a node's registration (through this replica): the node
// is dialed at its address and every Joins subscriber learns its id.
func (c *Set) Join(n cluster.Node) { c.join(n, false) }

// JoinLocal delivers the join of the node in this process registered as
// id (one house's), which Recover reconciled: it has no registration of
// its own to deliver it.
func (c *Set) JoinLocal(id string) error {
	n, err := c.reg.Get(id)
	if err != nil {
		return fmt.Errorf("join node %s: %w", id, err)
	}
	if _, ok := c.InProcess(n.ID, n.Address); !ok {
		return fmt.Errorf("join node %s: it does not run in this process", id)
	}
	c.join(n, false)
	return nil
}

// Heard is told of a heartbeat through this replica. A node this replica
// has not seen join does now: it registered before this replica started
// (a control plane restarted over its store keeps its nodes, whose
// heartbeats go on), or through another replica.
func (c *Set) Heard(id string) {
	c.mu.Lock()
	known := slices.Contains(c.joined, id)
	c.mu.Unlock()
	if known {
		return
	}
	if n, err := c.reg.Get(id); err == nil {
		c.join(n, true)
	}
}

// join delivers n's id to the subscribers; with onlyNew, only if no
// registration of it was delivered yet (a heartbeat raced one).
func (c *Set) join(n cluster.Node, onlyNew bool) {
	if _, err := c.client(n.ID, n.Address); err != nil {
		return // its address was checked by the registry; Node reports the error
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Contains(c.joined, n.ID) {
		if onlyNew {
			return
		}
	} else {
		c.joined = append(c.joined, n.ID)
	}
	for sub := range c.subs {
		sub.deliver(n.ID)
	}
}

// Node returns the node's client, unless the node is unknown,
// unreachable or lost.
func (c *Set) Node(id string) (controlplane.Node, error) {
	n, err := c.reg.Get(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", controlplane.ErrNodeUnavailable, err)
	}
	switch n.State {
	case cluster.Unreachable, cluster.Lost:
		return nil, fmt.Errorf("%w: node %s is %s (%s)", controlplane.ErrNodeUnavailable, id, n.State, n.Reason)
	}
	rn, err := c.client(id, n.Address)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", controlplane.ErrNodeUnavailable, err)
	}
	return rn, nil
}

func (c *Set) Place(req cluster.PlaceRequest) (string, error) { return c.reg.Place(req) }

// Runtimes are those the node reported in its last registration or
// heartbeat: no call to the node on a create.
func (c *Set) Runtimes(id string) (map[string]string, error) {
	n, err := c.reg.Get(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", controlplane.ErrNodeUnavailable, err)
	}
	return n.Info.Runtimes, nil
}

// State is the node's state; a node the registry does not know (any
// more) is lost to its sandboxes.
func (c *Set) State(id string) cluster.State {
	n, err := c.reg.Get(id)
	if errors.Is(err, cluster.ErrUnknownNode) {
		return cluster.Lost
	}
	if err != nil {
		return cluster.Unreachable
	}
	return n.State
}

// Joins delivers the ids of the nodes joined through this replica so far,
// then of each registration as it comes, until ctx ends.
func (c *Set) Joins(ctx context.Context) <-chan string {
	sub := &joinSub{ctx: ctx, ch: make(chan string)}
	c.mu.Lock()
	for _, id := range c.joined {
		sub.deliver(id)
	}
	c.subs[sub] = struct{}{}
	c.mu.Unlock()
	go func() {
		<-ctx.Done()
		c.mu.Lock()
		delete(c.subs, sub)
		c.mu.Unlock()
		sub.sends.Wait()
		close(sub.ch)
	}()
	return sub.ch
}

// Close releases the nodes' connections.
func (c *Set) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rn := range c.clients {
		_ = rn.Close()
	}
}
