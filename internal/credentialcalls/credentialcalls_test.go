package credentialcalls

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// fakeSandboxes are records by id, as the control plane's Get gives them,
// on a cluster's nodes: a record that names no node is on none.
type fakeSandboxes map[string]controlplane.Sandbox

func (f fakeSandboxes) NodeOf(s controlplane.Sandbox) string { return s.Node }

// houseNode is the id of one house's node in these tests.
const houseNode = "house-1a2b3c"

// servedSandboxes are fakeSandboxes under one house, whose node holds the
// records that name none (controlplane.Config.LocalNode).
type servedSandboxes struct{ fakeSandboxes }

func (f servedSandboxes) NodeOf(s controlplane.Sandbox) string { return cmp.Or(s.Node, houseNode) }

func (f fakeSandboxes) Get(_ project.Scope, id string) (controlplane.Sandbox, error) {
	sb, ok := f[id]
	if !ok {
		return sb, controlplane.NotFound(id)
	}
	return sb, nil
}

// credentialService serves the cluster service with Answerer
// over a real secret store, for sandboxes and token given, and returns
// its URL and CA.
func credentialService(t *testing.T, sandboxes fakeSandboxes, stored map[string]string) (string, *credentials.CA) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sec, err := secrets.Open(st, make([]byte, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	for ref, v := range stored {
		if _, _, err := sec.Set(ref, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := cluster.New(cluster.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := credentials.NewCA("cluster")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	path, h := clusterrpc.NewHandler(clusterrpc.ServerConfig{
		Token: "s3cret",
		ControlPlane: &cpapi.Service{Registry: reg, Logger: logger,
			Credentials: Answerer{CA: ca, Sandboxes: func() Sandboxes { return sandboxes }, Secrets: sec}},
	})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, ca
}

// The control plane hands the egress CA and a sandbox's rules and secrets
// only to callers with the cluster token, the rules and secrets only to
// the node the sandbox's record names, and a secret only when the
// sandbox's rules name it, read from the sandbox's own project.
func TestClusterCredentialCalls(t *testing.T) {
	rules := []credentials.Rule{{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"}}
	url, ca := credentialService(t, fakeSandboxes{
		"sb-a":    {ID: "sb-a", Project: "alpha", Node: "n1", State: apiv1.StateRunning, Credentials: rules},
		"sb-b":    {ID: "sb-b", Project: "beta", Node: "n2", State: apiv1.StateRunning, Credentials: rules},
		"sb-gone": {ID: "sb-gone", Project: "alpha", Node: "n1", State: apiv1.StateStopped, Credentials: rules},
	}, map[string]string{
		secrets.Ref("alpha", "TOKEN"): "alpha-token", secrets.Ref("alpha", "OTHER"): "alpha-other",
		secrets.Ref("beta", "TOKEN"): "beta-token",
	})
	ctx := context.Background()

	wrong, err := clusterrpc.Dial(url, "not-the-token", clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.EgressCA(ctx, "n1"); !errors.Is(err, cpapi.ErrToken) {
		t.Errorf("egress CA with a wrong token: %v, want ErrToken", err)
	}
	if _, err := wrong.CredentialRules(ctx, "n1", "sb-a"); !errors.Is(err, cpapi.ErrToken) {
		t.Errorf("rules with a wrong token: %v, want ErrToken", err)
	}
	if v, err := wrong.Secret(ctx, "n1", "sb-a", "TOKEN"); !errors.Is(err, cpapi.ErrToken) || v != nil {
		t.Errorf("secret with a wrong token: %q, %v, want ErrToken", v, err)
	}

	c, err := clusterrpc.Dial(url, "s3cret", clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pem, err := c.EgressCA(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pem.CA()
	if err != nil || got.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("egress CA: %v, %v", got, err)
	}
	if _, err := got.Leaf("api.example.com"); err != nil {
		t.Fatalf("the fetched CA cannot sign: %v", err)
	}

	r, err := c.CredentialRules(ctx, "n1", "sb-a")
	if err != nil || len(r) != 1 || r[0] != rules[0] {
		t.Fatalf("rules of sb-a for n1: %+v, %v", r, err)
	}
	if v, err := c.Secret(ctx, "n1", "sb-a", "TOKEN"); err != nil || string(v) != "alpha-token" {
		t.Fatalf("secret of sb-a for n1: %q, %v, want alpha's", v, err)
	}
	if v, err := c.Secret(ctx, "n2", "sb-b", "TOKEN"); err != nil || string(v) != "beta-token" {
		t.Fatalf("secret of sb-b for n2: %q, %v, want beta's", v, err)
	}

	// Another node's sandbox: neither its rules nor its secrets.
	if r, err := c.CredentialRules(ctx, "n2", "sb-a"); !errors.Is(err, cpapi.ErrDenied) || r != nil {
		t.Errorf("rules of n1's sandbox for n2: %+v, %v, want ErrDenied", r, err)
	}
	if v, err := c.Secret(ctx, "n2", "sb-a", "TOKEN"); !errors.Is(err, cpapi.ErrDenied) || v != nil {
		t.Errorf("secret of n1's sandbox for n2: %q, %v, want ErrDenied", v, err)
	}
	if _, err := c.Secret(ctx, "", "sb-a", "TOKEN"); !errors.Is(err, cpapi.ErrDenied) {
		t.Errorf("secret for no node: %v, want ErrDenied", err)
	}
	// A secret of the project its rules do not name: refused, though the
	// project holds it.
	if v, err := c.Secret(ctx, "n1", "sb-a", "OTHER"); !errors.Is(err, cpapi.ErrDenied) || v != nil {
		t.Errorf("unnamed secret: %q, %v, want ErrDenied", v, err)
	}
	// Another project's secret is out of reach: sb-b's rules name TOKEN,
	// which reads beta's, never alpha's; n1 asking for it through sb-b is
	// refused as another node's.
	if v, err := c.Secret(ctx, "n1", "sb-b", "TOKEN"); !errors.Is(err, cpapi.ErrDenied) || string(v) == "alpha-token" {
		t.Errorf("another project's sandbox: %q, %v", v, err)
	}

	// A stopped sandbox has no rules and gives no secret; an unknown one
	// is not found.
	if r, err := c.CredentialRules(ctx, "n1", "sb-gone"); err != nil || len(r) != 0 {
		t.Errorf("rules of a stopped sandbox: %+v, %v", r, err)
	}
	if _, err := c.Secret(ctx, "n1", "sb-gone", "TOKEN"); !errors.Is(err, cpapi.ErrDenied) {
		t.Errorf("secret of a stopped sandbox: %v, want ErrDenied", err)
	}
	if _, err := c.CredentialRules(ctx, "n1", "sb-none"); !errors.Is(err, cpapi.ErrNoSandbox) {
		t.Errorf("rules of an unknown sandbox: %v, want ErrNoSandbox", err)
	}
}

// countingClient answers like the control plane and counts the calls.
type countingClient struct {
	mu           sync.Mutex
	rules        map[string][]credentials.Rule
	value        string
	fail         error
	rulesCalls   int
	secretCalls  int
	lastNode     string
	lastSandbox  string
	lastSecretNm string
}

func (c *countingClient) CredentialRules(_ context.Context, node, id string) ([]credentials.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rulesCalls++
	c.lastNode, c.lastSandbox = node, id
	if c.fail != nil {
		return nil, c.fail
	}
	r, ok := c.rules[id]
	if !ok {
		return nil, cpapi.ErrNoSandbox
	}
	return r, nil
}

func (c *countingClient) Secret(_ context.Context, node, id, name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secretCalls++
	c.lastNode, c.lastSandbox, c.lastSecretNm = node, id, name
	if c.fail != nil {
		return nil, c.fail
	}
	return []byte(c.value), nil
}

// A node reuses the control plane's answers for a few seconds (an
// unknown sandbox's "no rules" too), asks again after, names itself in
// every call, and does not keep a failure.
func TestNodeCredentialsCache(t *testing.T) {
	rule := credentials.Rule{Host: "api.example.com", Header: "X-Key", Value: "${K}"}
	cc := &countingClient{rules: map[string][]credentials.Rule{"sb": {rule}}, value: "v1"}
	rc := NewNodeCache("n1", cc, slog.New(slog.NewTextHandler(io.Discard, nil)), TTL)
	now := time.Unix(1000, 0)
	rc.now = func() time.Time { return now }

	for range 3 {
		if r := rc.CredentialRules("sb"); len(r) != 1 || r[0] != rule {
			t.Fatalf("rules: %+v", r)
		}
		if r := rc.CredentialRules("unknown"); r != nil {
			t.Fatalf("rules of an unknown sandbox: %+v", r)
		}
		if v, err := rc.Secret("sb", "K"); err != nil || string(v) != "v1" {
			t.Fatalf("secret: %q, %v", v, err)
		}
	}
	if cc.rulesCalls != 2 || cc.secretCalls != 1 || cc.lastNode != "n1" {
		t.Fatalf("%d rules calls, %d secret calls (node %q), want 2 and 1 from n1", cc.rulesCalls, cc.secretCalls, cc.lastNode)
	}
	// After the TTL a changed secret is seen.
	cc.value = "v2"
	now = now.Add(TTL)
	if v, err := rc.Secret("sb", "K"); err != nil || string(v) != "v2" {
		t.Fatalf("secret after the TTL: %q, %v", v, err)
	}
	// A control plane that cannot answer: no rules, an error for the
	// secret, and nothing kept.
	now = now.Add(TTL)
	cc.fail = errors.New("control plane: connection refused")
	if r := rc.CredentialRules("sb"); r != nil {
		t.Fatalf("rules while the control plane fails: %+v", r)
	}
	if _, err := rc.Secret("sb", "K"); err == nil {
		t.Fatal("secret while the control plane fails: no error")
	}
	cc.fail = nil
	if r := rc.CredentialRules("sb"); len(r) != 1 {
		t.Fatalf("rules once the control plane answers again: %+v", r)
	}
}

// A record that names no node (written by a version with one node) is
// one house's node's, and no node's in a cluster; one house's gateway
// asks through the same contract, uncached, and gets what a cluster's
// node gets: the rules, and only the secrets they name.
func TestLegacyRecordsAndServesOwnNode(t *testing.T) {
	rules := []credentials.Rule{{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"}}
	records := fakeSandboxes{"sb-old": {ID: "sb-old", Project: "alpha", State: apiv1.StateRunning, Credentials: rules}}
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sec, err := secrets.Open(st, make([]byte, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"TOKEN": "alpha-token", "OTHER": "alpha-other"} {
		if _, _, err := sec.Set(secrets.Ref("alpha", name), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	creds := func(lookup Sandboxes) *NodeCache {
		svc := &cpapi.Service{Credentials: Answerer{Sandboxes: func() Sandboxes { return lookup }, Secrets: sec}}
		return NewNodeCache(houseNode, svc, slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
	}
	serve := creds(servedSandboxes{records})
	if got := serve.CredentialRules("sb-old"); len(got) != 1 || got[0] != rules[0] {
		t.Fatalf("serve's rules of a legacy record: %+v", got)
	}
	if v, err := serve.Secret("sb-old", "TOKEN"); err != nil || string(v) != "alpha-token" {
		t.Fatalf("serve's secret of a legacy record: %q, %v", v, err)
	}
	if _, err := serve.Secret("sb-old", "OTHER"); !errors.Is(err, cpapi.ErrDenied) {
		t.Fatalf("a secret no rule names: %v, want ErrDenied", err)
	}
	// Uncached: a record's new rules apply to the next connection.
	records["sb-old"] = controlplane.Sandbox{ID: "sb-old", Project: "alpha", State: apiv1.StateRunning}
	if got := serve.CredentialRules("sb-old"); len(got) != 0 {
		t.Fatalf("rules after they were removed: %+v", got)
	}
	records["sb-old"] = controlplane.Sandbox{ID: "sb-old", Project: "alpha", State: apiv1.StateRunning, Credentials: rules}
	if got := creds(records).CredentialRules("sb-old"); len(got) != 0 {
		t.Fatalf("a cluster's node got the rules of a record that names no node: %+v", got)
	}
	if err := (&cpapi.Service{}).Register(context.Background(), "n1", "http://127.0.0.1:1", nodeapi.Info{}, nil); !errors.Is(err, cpapi.ErrUnsupported) {
		t.Fatalf("a registration with serve's control plane: %v, want ErrUnsupported", err)
	}
}
