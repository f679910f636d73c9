// Package cpapi is the contract a node holds with its control plane, the
// other direction of nodeapi: a node registers and heartbeats its Info
// and the templates it holds, takes the installation's egress CA, and
// asks, at connection time, for its sandboxes' credential rules and the
// secrets they name. ControlPlane is that contract. Service implements it
// in the control plane's process (over the node registry and the
// control plane's credentials); clusterrpc serves Service over the
// network and its client implements ControlPlane again, and both pass
// cpapitest's suite.
//
// Every argument and result is a serializable value: the contract
// crosses a process in a cluster.
package cpapi

import (
	"context"
	"errors"
	"time"

	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
)

// ControlPlane is what a node asks of its control plane.
//
// Register and Heartbeat answer the registry's errors: one wrapping
// cluster.ErrUnknownNode when the control plane does not know the node
// (it registers again), cluster.ErrConflict when the node was removed as
// lost (it stops), cluster.ErrInvalid for a malformed id or address.
// The credential calls answer ErrNoSandbox, ErrDenied, ErrUnsupported,
// and over a network ErrToken.
type ControlPlane interface {
	// Register joins node id, reachable at address, with its Info and
	// the templates it holds.
	Register(ctx context.Context, id, address string, info nodeapi.Info, templates []Template) error
	// Heartbeat reports a registered node's Info and templates.
	Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []Template) error
	// EgressCA is the installation's egress CA, which every template
	// trusts and the node's gateway signs intercepted connections with.
	EgressCA(ctx context.Context, node string) (EgressCA, error)
	// CredentialRules are the rules of sandbox sandboxID, which must run
	// on node (none once it stopped).
	CredentialRules(ctx context.Context, node, sandboxID string) ([]credentials.Rule, error)
	// Secret is the value of secret name, which the rules of sandbox
	// sandboxID (running on node) must name, from the sandbox's project.
	Secret(ctx context.Context, node, sandboxID, name string) ([]byte, error)
}

// Template is a template ready on a node, by the catalog name it was
// built under.
type Template struct {
	Name string               `json:"name"`
	Spec nodeapi.TemplateSpec `json:"spec"`
	// SizeBytes is what the template's files occupy on the node;
	// CreatedAt and ReadyAt when its build there began and finished:
	// what a listing shows.
	SizeBytes int64      `json:"size_bytes,omitempty"`
	CreatedAt time.Time  `json:"created_at,omitzero"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
}

// EgressCA is a CA certificate and its key, PEM-encoded.
type EgressCA struct {
	CertPEM []byte `json:"cert_pem"`
	KeyPEM  []byte `json:"key_pem"`
}

// CA parses the PEM into a usable CA.
func (e EgressCA) CA() (*credentials.CA, error) {
	return credentials.ParseCA(e.CertPEM, e.KeyPEM)
}

// Errors of the credential calls, kept across the network.
var (
	// ErrNoSandbox: no live sandbox has the id.
	ErrNoSandbox = errors.New("no such sandbox")
	// ErrDenied: the sandbox runs on another node, or its rules do not
	// name the secret.
	ErrDenied = errors.New("permission denied")
	// ErrToken: the control plane refused the cluster token (remote only).
	ErrToken = errors.New("wrong cluster token")
	// ErrUnsupported: the control plane serves no credential calls.
	ErrUnsupported = errors.New("not served by this control plane")
)
