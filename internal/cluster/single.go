package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// InfoSource reports a node's Info (nodeapi.Control's Info method).
type InfoSource interface {
	Info(ctx context.Context) (nodeapi.Info, error)
}

// Single is the registry of a control plane that runs one node in its own
// process (`space serve`): that node, always ready, its Info read at each
// call. Cordon, drain and remove need a cluster and are refused.
type Single struct {
	id      string
	started time.Time
	source  InfoSource
}

// NewSingle returns the registry of the one in-process node id.
func NewSingle(id string, source InfoSource) *Single {
	return &Single{id: id, started: time.Now(), source: source}
}

// List returns the one node.
func (s *Single) List() ([]Node, error) {
	n, err := s.Get(s.id)
	if err != nil {
		return nil, err
	}
	return []Node{n}, nil
}

// Get returns the node, read now.
func (s *Single) Get(id string) (Node, error) {
	if id != s.id {
		return Node{}, fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	info, err := s.source.Info(context.Background())
	if err != nil {
		return Node{}, fmt.Errorf("read node %s: %w", id, err)
	}
	info.ID = id
	return Node{ID: id, State: Ready, RegisteredAt: s.started, LastHeartbeat: time.Now(), Info: info}, nil
}

func (s *Single) refuse(id, op string) error {
	if id != s.id {
		return fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	return fmt.Errorf("%w: node %s is this server's only node, run in its process; %s needs a cluster (space control-plane with space node)", ErrConflict, id, op)
}

// Cordon is refused: new sandboxes would have nowhere to go.
func (s *Single) Cordon(id string) (Node, error) { return Node{}, s.refuse(id, "cordon") }

// Uncordon is refused: the node is never cordoned.
func (s *Single) Uncordon(id string) (Node, error) { return Node{}, s.refuse(id, "uncordon") }

// Drain is refused: there is no other node to move sandboxes to.
func (s *Single) Drain(id string) (Node, error) { return Node{}, s.refuse(id, "drain") }

// Remove is refused: the node is the server.
func (s *Single) Remove(id string, _ bool) (Node, bool, error) {
	return Node{}, false, s.refuse(id, "remove")
}
