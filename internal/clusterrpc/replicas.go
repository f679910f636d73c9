package clusterrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
)

// Replicas is a node's side of the cluster service when the control plane
// runs as several replicas: each call goes to the replica that answered
// last, and to the next ones in turn when that one does not answer (it
// died, or is restarting). The replicas share one registry in the store,
// so a node registered through one replica heartbeats through another.
// It implements cpapi.ControlPlane.
type Replicas struct {
	clients []*Client
	urls    []string

	mu  sync.Mutex
	cur int // the replica that answered last
}

var _ cpapi.ControlPlane = (*Replicas)(nil)

// DialReplicas returns a client of the control-plane replicas at urls, in
// the order they are tried first. It does not connect.
func DialReplicas(urls []string, token string, opts DialOptions) (*Replicas, error) {
	if len(urls) == 0 {
		return nil, errors.New("dial the control plane: no address")
	}
	r := &Replicas{urls: urls}
	for _, u := range urls {
		c, err := Dial(u, token, opts)
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

// Close releases every replica's idle connections.
func (r *Replicas) Close() error {
	for _, c := range r.clients {
		_ = c.Close()
	}
	return nil
}

// Register registers the node through the first replica that answers.
func (r *Replicas) Register(ctx context.Context, id, address string, info nodeapi.Info, templates []cpapi.Template) error {
	return r.try(func(c *Client) error { return c.Register(ctx, id, address, info, templates) })
}

// Heartbeat reports the node's Info through the first replica that
// answers; its answer's errors are as Client.Heartbeat's.
func (r *Replicas) Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []cpapi.Template) error {
	return r.try(func(c *Client) error { return c.Heartbeat(ctx, id, info, templates) })
}

// EgressCA gets the cluster's egress CA through the first replica that
// answers.
func (r *Replicas) EgressCA(ctx context.Context, id string) (ca cpapi.EgressCA, err error) {
	err = r.try(func(c *Client) (err error) { ca, err = c.EgressCA(ctx, id); return err })
	return ca, err
}

// CredentialRules gets a sandbox's credential rules through the first
// replica that answers.
func (r *Replicas) CredentialRules(ctx context.Context, id, sandboxID string) (rules []credentials.Rule, err error) {
	err = r.try(func(c *Client) (err error) { rules, err = c.CredentialRules(ctx, id, sandboxID); return err })
	return rules, err
}

// Secret gets a secret a sandbox's rules name through the first replica
// that answers.
func (r *Replicas) Secret(ctx context.Context, id, sandboxID, name string) (value []byte, err error) {
	err = r.try(func(c *Client) (err error) { value, err = c.Secret(ctx, id, sandboxID, name); return err })
	return value, err
}

// try calls the replicas in turn, from the one that answered last, until
// one answers: a success, or a refusal of the registry (unknown node,
// lost node, bad input), which every replica would answer alike. A
// replica that fails otherwise (unreachable, or failing itself) passes
// the call on.
func (r *Replicas) try(call func(*Client) error) error {
	r.mu.Lock()
	start := r.cur
	r.mu.Unlock()
	var errs []error
	for i := range r.clients {
		k := (start + i) % len(r.clients)
		err := call(r.clients[k])
		var refusal *remoteError
		if err == nil || errors.As(err, &refusal) {
			r.mu.Lock()
			r.cur = k
			r.mu.Unlock()
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.urls[k], err))
		if ctxErr := contextErr(err); ctxErr != nil {
			break // the caller gave up: no other replica is asked
		}
	}
	return errors.Join(errs...)
}

// contextErr is err's context error, if it is one.
func contextErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
