package controlplane

import (
	"context"
	"fmt"

	"github.com/space-platform/space/internal/cluster"
)

// OneNode is Nodes of one node n, named id, always ready, for tests of
// the control plane's logic on a fake node (space serve runs a registry,
// as a cluster does). Records without a node are on it.
func OneNode(id string, n Node) Nodes { return oneNode{id: id, n: n} }

type oneNode struct {
	id string
	n  Node
}

func (o oneNode) Node(id string) (Node, error) {
	if id == "" || id == o.id {
		return o.n, nil
	}
	return nil, fmt.Errorf("node %s: %w", id, ErrNodeUnavailable)
}

// Place returns the one node, whatever the request.
func (o oneNode) Place(cluster.PlaceRequest) (string, error) { return o.id, nil }

// Runtimes asks the one node, which runs in the process.
func (o oneNode) Runtimes(id string) (map[string]string, error) {
	n, err := o.Node(id)
	if err != nil {
		return nil, err
	}
	info, err := n.Info(context.Background())
	if err != nil {
		return nil, err
	}
	return info.Runtimes, nil
}

func (o oneNode) State(id string) cluster.State {
	if id == "" || id == o.id {
		return cluster.Ready
	}
	return cluster.Lost
}

func (o oneNode) Joins(ctx context.Context) <-chan string {
	ch := make(chan string, 1)
	ch <- o.id
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}
