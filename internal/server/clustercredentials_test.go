package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/auth"
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

// credentialService serves the cluster service with controlPlaneCredentials
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
			Credentials: controlPlaneCredentials{ca: ca, sandboxes: func() sandboxLookup { return sandboxes }, secrets: sec}},
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
	rc := newNodeCredentials("n1", cc, slog.New(slog.NewTextHandler(io.Discard, nil)), credentialTTL)
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
	now = now.Add(credentialTTL)
	if v, err := rc.Secret("sb", "K"); err != nil || string(v) != "v2" {
		t.Fatalf("secret after the TTL: %q, %v", v, err)
	}
	// A control plane that cannot answer: no rules, an error for the
	// secret, and nothing kept.
	now = now.Add(credentialTTL)
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

// The first replica makes the cluster's egress CA and seals it in the
// bootstrap record; later loads get the same CA, a record from before the
// CA gets one (kept from then on), and the record's CA does not open
// with another token.
func TestBootstrapKeepsTheEgressCA(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := auth.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	adminKey := filepath.Join(t.TempDir(), "admin.key")
	first, err := loadBootstrap(ctx, st, keys, "token-a", adminKey, "", bootstrapSeed{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := loadBootstrap(ctx, st, keys, "token-a", adminKey, "", bootstrapSeed{})
	if err != nil {
		t.Fatal(err)
	}
	if first.egressCA == nil || again.egressCA.Fingerprint() != first.egressCA.Fingerprint() {
		t.Fatalf("egress CAs %v and %v, want one, kept", first.egressCA, again.egressCA)
	}
	var rec bootstrapRecord
	if err := st.Get(bootstrapBucket, bootstrapKey, &rec); err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := first.egressCA.KeyPEM()
	if bytes.Contains(rec.EgressCAKey, keyPEM[30:60]) || bytes.Contains(rec.EgressCACert, first.egressCA.CertPEM()[30:60]) {
		t.Fatal("the record holds the CA in the clear")
	}
	if _, err := loadBootstrap(ctx, st, keys, "token-b", adminKey, "", bootstrapSeed{}); err == nil {
		t.Fatal("another token opened the record")
	}
	rec.EgressCAKey, rec.EgressCACert = nil, nil
	if err := st.Put(bootstrapBucket, bootstrapKey, rec); err != nil {
		t.Fatal(err)
	}
	upgraded, err := loadBootstrap(ctx, st, keys, "token-a", adminKey, "", bootstrapSeed{})
	if err != nil || upgraded.egressCA == nil || upgraded.adminKey != first.adminKey {
		t.Fatalf("a record without a CA: %+v, %v", upgraded, err)
	}
	later, err := loadBootstrap(ctx, st, keys, "token-a", adminKey, "", bootstrapSeed{})
	if err != nil || later.egressCA.Fingerprint() != upgraded.egressCA.Fingerprint() {
		t.Fatalf("the CA added to an old record is not kept: %v", err)
	}
}

// A seeded egress CA (serve's <data-dir>/ca) becomes a new record's and
// stays; a record that exists keeps its own.
func TestBootstrapTakesASeededEgressCA(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := auth.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := credentials.NewCA("seed")
	if err != nil {
		t.Fatal(err)
	}
	other, err := credentials.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	adminKey := filepath.Join(t.TempDir(), "admin.key")
	for i, ca := range []*credentials.CA{seed, other} {
		b, err := loadBootstrap(ctx, st, keys, "token", adminKey, "", bootstrapSeed{egressCA: ca})
		if err != nil {
			t.Fatal(err)
		}
		if b.egressCA.Fingerprint() != seed.Fingerprint() {
			t.Fatalf("load %d: the egress CA is not the seeded one the record was made with", i)
		}
	}
}

// An admin key the installer chose is the first admin key of an empty
// store (it works, the record keeps it, it is not reported as minted); a store that has one already ignores a new choice,
// and a malformed choice is refused.
func TestBootstrapWithAGivenAdminKey(t *testing.T) {
	ctx := context.Background()
	open := func() (store.Store, *auth.Keys) {
		st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		keys, err := auth.Open(st)
		if err != nil {
			t.Fatal(err)
		}
		return st, keys
	}
	given := "e2b_" + strings.Repeat("ab12", 10)
	st, keys := open()
	path := filepath.Join(t.TempDir(), "admin.key")
	b, err := loadBootstrap(ctx, st, keys, "token", path, given, bootstrapSeed{})
	if err != nil {
		t.Fatal(err)
	}
	if b.adminKey != given || b.created {
		t.Fatalf("bootstrap with a given key: admin %q, created %v", b.adminKey, b.created)
	}
	if k, err := keys.Check(given); err != nil || !k.Admin {
		t.Fatalf("the given key does not work as an admin key: %+v, %v", k, err)
	}
	other := "e2b_" + strings.Repeat("cd34", 10)
	again, err := loadBootstrap(ctx, st, keys, "token", path, other, bootstrapSeed{})
	if err != nil || again.adminKey != given {
		t.Fatalf("a second bootstrap with another key: %q, %v; want the first kept", again.adminKey, err)
	}
	if _, err := keys.Check(other); err == nil {
		t.Fatal("a later choice of admin key was added to a bootstrapped store")
	}
	for _, bad := range []string{"e2b_short", "e2b_" + strings.Repeat("AB12", 10), strings.Repeat("ab12", 11), "e2b_" + strings.Repeat("zz12", 10)} {
		st, keys := open()
		if _, err := loadBootstrap(ctx, st, keys, "token", filepath.Join(t.TempDir(), "admin.key"), bad, bootstrapSeed{}); !errors.Is(err, auth.ErrKeyFormat) {
			t.Errorf("given admin key %q: %v, want ErrKeyFormat", bad, err)
		}
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
	creds := func(lookup sandboxLookup) *nodeCredentials {
		svc := &cpapi.Service{Credentials: controlPlaneCredentials{sandboxes: func() sandboxLookup { return lookup }, secrets: sec}}
		return newNodeCredentials(houseNode, svc, slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
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
