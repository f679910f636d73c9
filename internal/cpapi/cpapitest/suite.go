// Package cpapitest is the conformance suite of cpapi.ControlPlane: every
// implementation (cpapi.Service in process, the cluster RPC's client over
// its server) must behave alike, registry refusals and credential errors
// included.
package cpapitest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

// Transport makes the implementation under test of svc: svc itself in
// process, or a client of svc served over a network.
type Transport func(t *testing.T, svc *cpapi.Service) cpapi.ControlPlane

// Run runs the suite on what transport makes of a Service over a real
// node registry (bbolt) and Credentials, a fake of the control plane's
// records.
func Run(t *testing.T, transport Transport) {
	t.Run("RegisterAndHeartbeat", func(t *testing.T) { testRegisterAndHeartbeat(t, transport) })
	t.Run("RegistryRefusals", func(t *testing.T) { testRegistryRefusals(t, transport) })
	t.Run("EgressCA", func(t *testing.T) { testEgressCA(t, transport) })
	t.Run("CredentialRules", func(t *testing.T) { testCredentialRules(t, transport) })
	t.Run("Secrets", func(t *testing.T) { testSecrets(t, transport) })
	t.Run("NoCredentials", func(t *testing.T) { testNoCredentials(t, transport) })
}

// backing is a Service's state: the registry, the credentials and what
// Joined and Heard were told.
type backing struct {
	reg   *cluster.Registry
	creds *Credentials
	svc   *cpapi.Service

	mu     sync.Mutex
	joined []string
	heard  map[string][]cpapi.Template
}

// NewRegistry is a node registry on a store of its own (bbolt, in a
// temporary directory), closed when t ends.
func NewRegistry(t *testing.T) *cluster.Registry {
	t.Helper()
	_, reg := NewStoreAndRegistry(t)
	return reg
}

// NewStoreAndRegistry is NewRegistry with its store, for a test that
// keeps more in it (a catalog's records).
func NewStoreAndRegistry(t *testing.T) (store.Store, *cluster.Registry) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := cluster.New(cluster.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return st, reg
}

func newBacking(t *testing.T) *backing {
	t.Helper()
	reg := NewRegistry(t)
	ca, err := credentials.NewCA("cpapitest")
	if err != nil {
		t.Fatal(err)
	}
	b := &backing{reg: reg, creds: NewCredentials(ca), heard: map[string][]cpapi.Template{}}
	b.svc = &cpapi.Service{
		Registry: reg, Credentials: b.creds,
		Joined: func(n cluster.Node, ts []cpapi.Template) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.joined = append(b.joined, n.ID)
			b.heard[n.ID] = ts
		},
		Heard: func(id string, ts []cpapi.Template) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.heard[id] = ts
		},
	}
	return b
}

func (b *backing) templatesOf(id string) []cpapi.Template {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heard[id]
}

var (
	tplMinimal = cpapi.Template{Name: "minimal", Spec: nodeapi.TemplateSpec{
		ID: "0123", RootfsVolume: "templates/0123", Env: map[string]string{"A": "b"}, User: "user",
		Workdir: "/home/user", Start: "sleep infinity", Ready: "true", Runtimes: []string{"gvisor", "microvm"}}}
	tplBase = cpapi.Template{Name: "base", Spec: nodeapi.TemplateSpec{ID: "4567", RootfsVolume: "templates/4567"}}
)

func testRegisterAndHeartbeat(t *testing.T, transport Transport) {
	b := newBacking(t)
	cp := transport(t, b.svc)
	ctx := context.Background()
	info := nodeapi.Info{ID: "n1", VCPUs: 4, MemoryMB: 8192, DiskMB: 1 << 20, Sandboxes: 2, Templates: []string{"0123"},
		TemplateImages: []string{"0123"}, Runtimes: map[string]string{"gvisor": "gvisor", "microvm": "microvm-tcg"},
		Pools: map[string]nodeapi.PoolStatus{"0123": {Size: 2, Ready: 1}}}
	if err := cp.Register(ctx, "n1", "http://127.0.0.1:7071", info, []cpapi.Template{tplMinimal}); err != nil {
		t.Fatal(err)
	}
	n, err := b.reg.Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Address != "http://127.0.0.1:7071" || !reflect.DeepEqual(n.Info.Pools, info.Pools) || n.Info.VCPUs != 4 ||
		!reflect.DeepEqual(n.Info.Runtimes, info.Runtimes) || !slices.Equal(n.Info.TemplateImages, info.TemplateImages) {
		t.Fatalf("registered node = %+v, want the Info %+v", n, info)
	}
	if got := b.templatesOf("n1"); !reflect.DeepEqual(got, []cpapi.Template{tplMinimal}) {
		t.Fatalf("templates of the registration: %+v, want %+v", got, tplMinimal)
	}
	if b.joined[0] != "n1" || len(b.joined) != 1 {
		t.Fatalf("joined %v", b.joined)
	}

	info.Sandboxes = 3
	if err := cp.Heartbeat(ctx, "n1", info, []cpapi.Template{tplMinimal, tplBase}); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.reg.Get("n1"); n.Info.Sandboxes != 3 {
		t.Fatalf("heartbeat not recorded: %+v", n.Info)
	}
	if got := b.templatesOf("n1"); len(got) != 2 || got[1].Name != "base" || got[1].Spec.ID != "4567" {
		t.Fatalf("templates of the heartbeat: %+v", got)
	}
	// A node that holds no template says so: the list is empty, not kept.
	if err := cp.Heartbeat(ctx, "n1", info, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.templatesOf("n1"); len(got) != 0 {
		t.Fatalf("templates after an empty heartbeat: %+v", got)
	}
}

func testRegistryRefusals(t *testing.T, transport Transport) {
	b := newBacking(t)
	cp := transport(t, b.svc)
	ctx := context.Background()
	info := nodeapi.Info{VCPUs: 1, MemoryMB: 1024}
	if err := cp.Heartbeat(ctx, "n1", info, nil); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat before the registration: %v, want ErrUnknownNode", err)
	}
	for _, bad := range []struct{ id, address string }{{"N 1", "http://127.0.0.1:7071"}, {"n1", "not a URL"}, {"", "http://127.0.0.1:7071"}} {
		if err := cp.Register(ctx, bad.id, bad.address, info, nil); !errors.Is(err, cluster.ErrInvalid) {
			t.Errorf("register %q at %q: %v, want ErrInvalid", bad.id, bad.address, err)
		}
	}
	if err := cp.Register(ctx, "n1", "http://127.0.0.1:7071", info, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.reg.Remove("n1", true); err != nil {
		t.Fatal(err)
	}
	err := cp.Heartbeat(ctx, "n1", info, nil)
	if !errors.Is(err, cluster.ErrConflict) && !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat of a removed node: %v, want ErrConflict or ErrUnknownNode", err)
	}
}

func testEgressCA(t *testing.T, transport Transport) {
	b := newBacking(t)
	got, err := transport(t, b.svc).EgressCA(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := b.creds.ca.KeyPEM()
	if string(got.CertPEM) != string(b.creds.ca.CertPEM()) || string(got.KeyPEM) != string(key) {
		t.Fatal("the egress CA differs from the control plane's")
	}
	if _, err := got.CA(); err != nil {
		t.Fatalf("the egress CA does not parse: %v", err)
	}
}

func testCredentialRules(t *testing.T, transport Transport) {
	b := newBacking(t)
	cp := transport(t, b.svc)
	ctx := context.Background()
	rules := []credentials.Rule{
		{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"},
		{Host: "*.example.org", Env: "PLACEHOLDER", Secret: "KEY", Placeholder: "space-placeholder-1"},
	}
	b.creds.Put("sb1", "n1", "p1", rules)
	got, err := cp.CredentialRules(ctx, "n1", "sb1")
	if err != nil || !reflect.DeepEqual(got, rules) {
		t.Fatalf("rules of sb1 on n1: %+v, %v; want %+v", got, err, rules)
	}
	if _, err := cp.CredentialRules(ctx, "n2", "sb1"); !errors.Is(err, cpapi.ErrDenied) {
		t.Fatalf("rules of sb1 asked by n2: %v, want ErrDenied", err)
	}
	if _, err := cp.CredentialRules(ctx, "n1", "nosuch"); !errors.Is(err, cpapi.ErrNoSandbox) {
		t.Fatalf("rules of an unknown sandbox: %v, want ErrNoSandbox", err)
	}
	b.creds.Put("sb2", "n1", "p1", nil)
	if got, err := cp.CredentialRules(ctx, "n1", "sb2"); err != nil || len(got) != 0 {
		t.Fatalf("rules of a sandbox without rules: %+v, %v", got, err)
	}
}

func testSecrets(t *testing.T, transport Transport) {
	b := newBacking(t)
	cp := transport(t, b.svc)
	ctx := context.Background()
	b.creds.Put("sb1", "n1", "p1", []credentials.Rule{{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"}})
	b.creds.SetSecret("p1", "TOKEN", []byte("the-value"))
	b.creds.SetSecret("p1", "OTHER", []byte("not named"))
	b.creds.SetSecret("p2", "TOKEN", []byte("another project's"))
	if v, err := cp.Secret(ctx, "n1", "sb1", "TOKEN"); err != nil || string(v) != "the-value" {
		t.Fatalf("secret TOKEN of sb1: %q, %v", v, err)
	}
	if _, err := cp.Secret(ctx, "n1", "sb1", "OTHER"); !errors.Is(err, cpapi.ErrDenied) {
		t.Fatalf("a secret the rules do not name: %v, want ErrDenied", err)
	}
	if _, err := cp.Secret(ctx, "n2", "sb1", "TOKEN"); !errors.Is(err, cpapi.ErrDenied) {
		t.Fatalf("a secret asked by another node: %v, want ErrDenied", err)
	}
	if _, err := cp.Secret(ctx, "n1", "nosuch", "TOKEN"); !errors.Is(err, cpapi.ErrNoSandbox) {
		t.Fatalf("a secret of an unknown sandbox: %v, want ErrNoSandbox", err)
	}
}

func testNoCredentials(t *testing.T, transport Transport) {
	b := newBacking(t)
	b.svc.Credentials = nil
	cp := transport(t, b.svc)
	ctx := context.Background()
	if _, err := cp.EgressCA(ctx, "n1"); !errors.Is(err, cpapi.ErrUnsupported) {
		t.Errorf("egress CA without credentials: %v, want ErrUnsupported", err)
	}
	if _, err := cp.CredentialRules(ctx, "n1", "sb1"); !errors.Is(err, cpapi.ErrUnsupported) {
		t.Errorf("rules without credentials: %v, want ErrUnsupported", err)
	}
	if _, err := cp.Secret(ctx, "n1", "sb1", "TOKEN"); !errors.Is(err, cpapi.ErrUnsupported) {
		t.Errorf("secret without credentials: %v, want ErrUnsupported", err)
	}
}

// Credentials is a fake of the control plane's credential records:
// sandboxes with their node, project and rules, and secrets by project.
type Credentials struct {
	ca *credentials.CA

	mu        sync.Mutex
	sandboxes map[string]fakeSandbox
	secrets   map[string][]byte
}

type fakeSandbox struct {
	node, project string
	rules         []credentials.Rule
}

var _ cpapi.Credentials = (*Credentials)(nil)

// NewCredentials is a fake with egress CA ca and no sandboxes.
func NewCredentials(ca *credentials.CA) *Credentials {
	return &Credentials{ca: ca, sandboxes: map[string]fakeSandbox{}, secrets: map[string][]byte{}}
}

// Put records sandbox id running on node, in project, with rules.
func (c *Credentials) Put(id, node, project string, rules []credentials.Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sandboxes[id] = fakeSandbox{node: node, project: project, rules: rules}
}

// SetSecret stores a project's secret.
func (c *Credentials) SetSecret(project, name string, value []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets[project+"/"+name] = value
}

func (c *Credentials) EgressCA() ([]byte, []byte, error) {
	key, err := c.ca.KeyPEM()
	return c.ca.CertPEM(), key, err
}

func (c *Credentials) sandbox(node, id string) (fakeSandbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sb, ok := c.sandboxes[id]
	if !ok {
		return sb, fmt.Errorf("sandbox %s: %w", id, cpapi.ErrNoSandbox)
	}
	if sb.node != node {
		return sb, fmt.Errorf("sandbox %s does not run on node %q: %w", id, node, cpapi.ErrDenied)
	}
	return sb, nil
}

func (c *Credentials) CredentialRules(node, id string) ([]credentials.Rule, error) {
	sb, err := c.sandbox(node, id)
	return sb.rules, err
}

func (c *Credentials) Secret(node, id, name string) ([]byte, error) {
	sb, err := c.sandbox(node, id)
	if err != nil {
		return nil, err
	}
	for _, r := range sb.rules {
		if slices.Contains(r.Secrets(), name) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.secrets[sb.project+"/"+name], nil
		}
	}
	return nil, fmt.Errorf("the rules of sandbox %s name no secret %q: %w", id, name, cpapi.ErrDenied)
}
