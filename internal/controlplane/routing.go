package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/pkg/apiv1"
)

// NodeUnavailableError is an operation refused because the sandbox's node
// does not answer; nothing about the sandbox changed. It wraps
// ErrNodeUnavailable (the API answers 503).
type NodeUnavailableError struct {
	Sandbox string
	Node    string
	State   string // node_state: "unreachable" or "lost"
}

func (e *NodeUnavailableError) Error() string {
	if e.Sandbox == "" {
		return fmt.Sprintf("node %s is %s", e.Node, e.State)
	}
	return fmt.Sprintf("sandbox %s is on node %s, which is %s; try again when the node is back", e.Sandbox, e.Node, e.State)
}

func (e *NodeUnavailableError) Unwrap() error { return ErrNodeUnavailable }

// LegacyLocalNode is the name serve's node had before it had an id of its
// own (one house's `space serve` gives it one): records that name it are
// on the local node.
const LegacyLocalNode = "local"

// nodeID is the node a record names; "" (records of versions with one
// node) and LegacyLocalNode are the local node, when there is one.
func (cp *ControlPlane) nodeID(id string) string {
	if id == "" || id == LegacyLocalNode && cp.cfg.LocalNode != "" {
		return cp.cfg.LocalNode
	}
	return id
}

// NodeOf is the node sandbox s runs on: the node its record names, or
// for a record of a version with one node (none named), that node when
// the Nodes has one ("" otherwise).
func (cp *ControlPlane) NodeOf(s Sandbox) string { return cp.nodeID(s.Node) }

// sameNode reports whether two records' nodes are one.
func (cp *ControlPlane) sameNode(a, b string) bool { return cp.nodeID(a) == cp.nodeID(b) }

// nodeState is a node's state as sandbox objects report it: "ready" while
// the node answers (cordoned and draining nodes do), "unreachable" or
// "lost" otherwise.
func (cp *ControlPlane) nodeState(id string) string {
	switch st := cp.cfg.Nodes.State(cp.nodeID(id)); st {
	case cluster.Unreachable:
		return string(cluster.Unreachable)
	case cluster.Ready, cluster.Cordoned, cluster.Draining:
		return string(cluster.Ready)
	default:
		return string(cluster.Lost)
	}
}

// node returns the node id (as a record names it) for an operation of
// sandbox sandboxID ("" when it is not a sandbox's), or a
// *NodeUnavailableError.
func (cp *ControlPlane) node(id, sandboxID string) (Node, error) {
	n, err := cp.cfg.Nodes.Node(cp.nodeID(id))
	if err != nil {
		if !errors.Is(err, ErrNodeUnavailable) {
			return nil, fmt.Errorf("node %s: %w", cp.nodeID(id), err)
		}
		state := cp.nodeState(id)
		if state == string(cluster.Ready) {
			state = string(cluster.Unreachable) // it did not answer
		}
		return nil, &NodeUnavailableError{Sandbox: sandboxID, Node: cp.nodeID(id), State: state}
	}
	return n, nil
}

// nodeOf is the node of sandbox s.
func (cp *ControlPlane) nodeOf(s Sandbox) (Node, error) { return cp.node(s.Node, s.ID) }

// nodeFor is the node of the sandbox of record r.
func (cp *ControlPlane) nodeFor(r *record) (Node, error) { return cp.nodeOf(cp.snapshot(r)) }

// View is the public view of a sandbox, with its node and the node's state
// now.
func (cp *ControlPlane) View(s Sandbox) apiv1.Sandbox {
	v := s.API()
	v.Node = cp.nodeID(s.Node)
	v.NodeState = cp.nodeState(s.Node)
	return v
}

// fleet is what the control plane tracks of its nodes: those that joined
// (pools are split over them), whose events it follows, and whether the
// first join of a node needs no reconcile because Recover made one.
type fleet struct {
	mu         sync.Mutex
	joined     []string
	following  map[string]context.CancelFunc
	reconciled map[string]bool
	// poolDefaults are the pool sizes ApplyPools was given.
	poolDefaults map[string]int
}

func (f *fleet) join(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.joined, id) {
		f.joined = append(f.joined, id)
		slices.Sort(f.joined)
	}
}

func (f *fleet) nodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.joined)
}

// markReconciled records that Recover reconciled node id, so that its
// first join does not reconcile it again.
func (f *fleet) markReconciled(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reconciled == nil {
		f.reconciled = map[string]bool{}
	}
	f.reconciled[id] = true
}

// takeReconciled reports (once) whether node id was reconciled by Recover.
func (f *fleet) takeReconciled(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	done := f.reconciled[id]
	delete(f.reconciled, id)
	return done
}

// follow registers the follower of node id, cancelling the one it
// replaces (the node registered again).
func (f *fleet) follow(id string, cancel context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.following == nil {
		f.following = map[string]context.CancelFunc{}
	}
	if old := f.following[id]; old != nil {
		old()
	}
	f.following[id] = cancel
}
