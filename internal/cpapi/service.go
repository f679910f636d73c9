package cpapi

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
)

// Registry is the part of the node registry Service drives
// (*cluster.Registry).
type Registry interface {
	Register(id, address string, info nodeapi.Info) (cluster.Node, error)
	Heartbeat(id string, info nodeapi.Info) error
}

// Credentials answers the credential calls from the control plane's
// records. node is the calling node's id: a sandbox's rules and secrets
// go only to the node its record names. Its errors wrap ErrNoSandbox and
// ErrDenied.
type Credentials interface {
	EgressCA() (certPEM, keyPEM []byte, err error)
	CredentialRules(node, sandboxID string) ([]credentials.Rule, error)
	Secret(node, sandboxID, name string) ([]byte, error)
}

// Service is the control plane's side of the contract, in its own
// process: a node in the same process calls it directly, and clusterrpc
// serves it to nodes elsewhere.
type Service struct {
	// Registry takes the nodes' registrations; nil (a control plane
	// whose one node is in its process, space serve): Register and
	// Heartbeat answer ErrUnsupported.
	Registry Registry
	// Credentials answers the credential calls; nil: ErrUnsupported.
	Credentials Credentials
	// Joined, when set, is told of every registration once the registry
	// took it (the control plane reconciles the node then).
	Joined func(n cluster.Node, templates []Template)
	// Heard, when set, is told of the templates of every heartbeat.
	Heard  func(id string, templates []Template)
	Logger *slog.Logger
}

var _ ControlPlane = (*Service)(nil)

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// Register takes the node into the registry and tells Joined.
func (s *Service) Register(ctx context.Context, id, address string, info nodeapi.Info, templates []Template) error {
	if s.Registry == nil {
		return fmt.Errorf("this control plane takes no node registrations: %w", ErrUnsupported)
	}
	n, err := s.Registry.Register(id, address, info)
	if err != nil {
		return err
	}
	s.log().Info("node registered", "node", n.ID, "address", n.Address, "state", n.State)
	if s.Joined != nil {
		s.Joined(n, templates)
	}
	return nil
}

// Heartbeat records the node's Info and tells Heard of its templates.
func (s *Service) Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []Template) error {
	if s.Registry == nil {
		return fmt.Errorf("this control plane takes no node registrations: %w", ErrUnsupported)
	}
	if err := s.Registry.Heartbeat(id, info); err != nil {
		return err
	}
	if s.Heard != nil {
		s.Heard(id, templates)
	}
	return nil
}

// EgressCA hands the egress CA to node.
func (s *Service) EgressCA(ctx context.Context, node string) (EgressCA, error) {
	if s.Credentials == nil {
		return EgressCA{}, ErrUnsupported
	}
	cert, key, err := s.Credentials.EgressCA()
	if err != nil {
		return EgressCA{}, err
	}
	s.log().Info("egress CA handed to a node", "node", node)
	return EgressCA{CertPEM: cert, KeyPEM: key}, nil
}

// CredentialRules are the rules of a sandbox node runs.
func (s *Service) CredentialRules(ctx context.Context, node, sandboxID string) ([]credentials.Rule, error) {
	if s.Credentials == nil {
		return nil, ErrUnsupported
	}
	return s.Credentials.CredentialRules(node, sandboxID)
}

// Secret is a secret the rules of a sandbox node runs name.
func (s *Service) Secret(ctx context.Context, node, sandboxID, name string) ([]byte, error) {
	if s.Credentials == nil {
		return nil, ErrUnsupported
	}
	return s.Credentials.Secret(node, sandboxID, name)
}
