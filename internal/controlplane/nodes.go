package controlplane

import (
	"context"
	"errors"

	"github.com/space-platform/space/internal/cluster"
)

// ErrNodeUnavailable is the error of an operation on a sandbox whose node
// does not answer (unreachable, lost, or not registered); the API answers
// 503. The sandbox is never deleted for it.
var ErrNodeUnavailable = errors.New("the sandbox's node is unavailable")

// Nodes is how the control plane reaches its nodes: the one node in the
// process of `space serve`, or the nodes registered with a cluster,
// reached over RPC.
type Nodes interface {
	// Node returns the node by id, or an error wrapping
	// ErrNodeUnavailable when the node is unknown, unreachable or lost.
	Node(id string) (Node, error)
	// Place chooses the node of a new sandbox; a refusal wraps
	// cluster.ErrNoCapacity and names the cluster's figures.
	Place(req cluster.PlaceRequest) (string, error)
	// State is a node's state as sandbox objects report it
	// (cluster.Ready, cluster.Unreachable, cluster.Lost, ...).
	State(id string) cluster.State
	// Runtimes are node id's backends with the isolation each gives, as
	// the node last reported them (its Info); none: a node from before the
	// choice, which runs gVisor alone.
	Runtimes(id string) (map[string]string, error)
	// Joins delivers the id of every node that joins from now on (and of
	// those already joined, first), each time it registers again too: the
	// control plane follows its events and reconciles its sandboxes then.
	// The channel closes when ctx ends.
	Joins(ctx context.Context) <-chan string
}
