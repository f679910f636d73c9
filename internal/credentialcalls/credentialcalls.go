// Package credentialcalls is both ends of the credential calls of the
// node → control-plane contract (cpapi). Credential injection, in a
// cluster and under serve alike: the control plane keeps the rules (in
// the sandboxes' records), the secrets and the egress CA; a node's
// gateway intercepts its sandboxes' TLS and asks the control plane for
// what it needs at connection time. Answerer answers on the control
// plane, behind cpapi.Service, and decides what a node may have;
// NodeCache asks on the node (over the cluster RPC, or in process under
// serve) and keeps the answers for seconds; FetchEgressCA gets a node
// the installation's egress CA before it builds or runs anything.
package credentialcalls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/pkg/apiv1"
)

// Sandboxes finds a sandbox's record (*controlplane.ControlPlane).
type Sandboxes interface {
	Get(scope project.Scope, id string) (controlplane.Sandbox, error)
	// NodeOf is the node a sandbox runs on, records of older versions
	// (which name none) included.
	NodeOf(s controlplane.Sandbox) string
}

// SecretReader reads a secret by secrets.Ref (*secrets.Store).
type SecretReader interface {
	Get(ref string) ([]byte, error)
}

// Answerer answers the nodes' credential calls on the control
// plane. A node gets the rules and secrets of the sandboxes its records
// say it runs, and only secrets those rules name, from the sandbox's own
// project: rules never reach another project's secrets, and one node's
// calls do not reach another's sandboxes.
type Answerer struct {
	CA *credentials.CA
	// Sandboxes gives the control plane's records at each call: the
	// control plane is built after the service that answers is.
	Sandboxes func() Sandboxes
	Secrets   SecretReader
}

var _ cpapi.Credentials = Answerer{}

// EgressCA implements cpapi.Credentials: the installation's egress CA,
// its certificate and key in PEM.
func (c Answerer) EgressCA() ([]byte, []byte, error) {
	key, err := c.CA.KeyPEM()
	if err != nil {
		return nil, nil, err
	}
	return c.CA.CertPEM(), key, nil
}

// sandbox is the live sandbox id as node may see it.
func (c Answerer) sandbox(node, id string) (controlplane.Sandbox, error) {
	sb, err := c.Sandboxes().Get(project.Everything, id)
	if errors.Is(err, controlplane.ErrNotFound) {
		return sb, fmt.Errorf("sandbox %s: %w", id, cpapi.ErrNoSandbox)
	}
	if err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if node == "" || c.Sandboxes().NodeOf(sb) != node {
		return sb, fmt.Errorf("sandbox %s does not run on node %q: %w", id, node, cpapi.ErrDenied)
	}
	// A stopped or failed sandbox has no traffic to inject into; its
	// rules go with it, as under serve (ControlPlane.CredentialRules).
	if sb.State == apiv1.StateStopped || sb.State == apiv1.StateFailed {
		sb.Credentials = nil
	}
	return sb, nil
}

// CredentialRules implements cpapi.Credentials: the rules of a live
// sandbox of node.
func (c Answerer) CredentialRules(node, id string) ([]credentials.Rule, error) {
	sb, err := c.sandbox(node, id)
	if err != nil {
		return nil, err
	}
	return sb.Credentials, nil
}

// Secret implements cpapi.Credentials: a secret of the sandbox's project
// that the rules of a live sandbox of node name.
func (c Answerer) Secret(node, id, name string) ([]byte, error) {
	sb, err := c.sandbox(node, id)
	if err != nil {
		return nil, err
	}
	named := false
	for _, r := range sb.Credentials {
		named = named || slices.Contains(r.Secrets(), name)
	}
	if !named {
		return nil, fmt.Errorf("the credential rules of sandbox %s name no secret %q: %w", id, name, cpapi.ErrDenied)
	}
	v, err := c.Secrets.Get(secrets.Ref(sb.Project, name))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return v, nil
}

// Client is the control plane as a node asks it for credentials (a
// cpapi.ControlPlane).
type Client interface {
	CredentialRules(ctx context.Context, node, sandboxID string) ([]credentials.Rule, error)
	Secret(ctx context.Context, node, sandboxID, name string) ([]byte, error)
}

const (
	// TTL is how long a node reuses an answer: the gateway asks
	// for every TLS connection and every request on an intercepted one,
	// and a changed secret reaches sandboxes within it.
	TTL = 5 * time.Second
	// maxCachedCredentials bounds each cache; a full one is emptied.
	maxCachedCredentials = 4096
	// credentialCallTimeout bounds one call: a sandbox's connection waits
	// for it.
	credentialCallTimeout = 5 * time.Second
)

// NodeCache is a node's credentials.RuleSource and SecretSource:
// the control plane, with its answers kept in memory for ttl (never on
// disk; not at all when ttl is 0, as for a control plane in the same
// process, whose answers cost no round trip).
type NodeCache struct {
	node   string
	client Client
	log    *slog.Logger
	now    func() time.Time
	ttl    time.Duration

	mu      sync.Mutex
	rules   map[string]cachedRules
	secrets map[[2]string]cachedSecret
}

type cachedRules struct {
	rules []credentials.Rule
	at    time.Time
}

type cachedSecret struct {
	value []byte
	at    time.Time
}

// NewNodeCache asks client, as node, and keeps its answers for ttl (TTL
// over a network, 0 in the control plane's own process).
func NewNodeCache(node string, client Client, log *slog.Logger, ttl time.Duration) *NodeCache {
	return &NodeCache{
		node: node, client: client, log: log, now: time.Now, ttl: ttl,
		rules: map[string]cachedRules{}, secrets: map[[2]string]cachedSecret{},
	}
}

// CredentialRules asks the control plane for the sandbox's rules. When
// it cannot answer, the sandbox has none for now: its TLS then goes
// through untouched, without credentials, rather than being cut.
func (r *NodeCache) CredentialRules(id string) []credentials.Rule {
	r.mu.Lock()
	c, ok := r.rules[id]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl {
		return c.rules
	}
	ctx, cancel := context.WithTimeout(context.Background(), credentialCallTimeout)
	defer cancel()
	rules, err := r.client.CredentialRules(ctx, r.node, id)
	switch {
	case errors.Is(err, cpapi.ErrNoSandbox):
		rules = nil // not (or no longer) a sandbox: no rules, remembered too
	case err != nil:
		r.log.Warn("credential rules: the control plane did not answer", "sandbox", id, "err", err)
		return nil
	}
	if r.ttl == 0 {
		return rules
	}
	r.mu.Lock()
	if len(r.rules) >= maxCachedCredentials {
		clear(r.rules)
	}
	r.rules[id] = cachedRules{rules: rules, at: r.now()}
	r.mu.Unlock()
	return rules
}

// Secret asks the control plane for a secret of the sandbox's rules.
func (r *NodeCache) Secret(id, name string) ([]byte, error) {
	key := [2]string{id, name}
	r.mu.Lock()
	c, ok := r.secrets[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl {
		return c.value, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), credentialCallTimeout)
	defer cancel()
	v, err := r.client.Secret(ctx, r.node, id, name)
	if err != nil {
		return nil, fmt.Errorf("secret %s of sandbox %s: %w", name, id, err)
	}
	if r.ttl == 0 {
		return v, nil
	}
	at := r.now()
	r.mu.Lock()
	if len(r.secrets) >= maxCachedCredentials {
		clear(r.secrets)
	}
	r.secrets[key] = cachedSecret{value: v, at: at}
	r.mu.Unlock()
	// The value leaves the node's memory when it goes stale, not when a
	// later call happens to replace it.
	time.AfterFunc(r.ttl, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if c, ok := r.secrets[key]; ok && c.at.Equal(at) {
			delete(r.secrets, key)
		}
	})
	return v, nil
}

// FetchEgressCA gets the cluster's egress CA from the control plane,
// waiting for it to answer: a node builds no template and starts no
// sandbox before it holds the CA its templates trust. A wrong cluster
// token (or a control plane without the call) ends the wait at once.
func FetchEgressCA(ctx context.Context, c interface {
	EgressCA(ctx context.Context, node string) (cpapi.EgressCA, error)
}, node string, say func(string, ...any)) (*credentials.CA, error) {
	wait, told := 500*time.Millisecond, false
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pem, err := c.EgressCA(callCtx, node)
		cancel()
		if err == nil {
			ca, err := pem.CA()
			if err != nil {
				return nil, fmt.Errorf("the control plane's egress CA: %w", err)
			}
			return ca, nil
		}
		if errors.Is(err, cpapi.ErrToken) || errors.Is(err, cpapi.ErrUnsupported) {
			return nil, fmt.Errorf("get the cluster's egress CA: %w", err)
		}
		if !told {
			say("waiting for the control plane to hand out the cluster's egress CA (%v)", err)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("get the cluster's egress CA: %w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
