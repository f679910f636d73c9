package clusterrpc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

type joins struct {
	mu        sync.Mutex
	joined    []cluster.Node
	templates map[string][]Template
}

func start(t *testing.T) (*cluster.Registry, *joins, string) {
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
	j := &joins{templates: map[string][]Template{}}
	path, h := NewHandler(ServerConfig{
		Registry: reg, Token: "s3cret",
		Joined: func(n cluster.Node, ts []Template) {
			j.mu.Lock()
			defer j.mu.Unlock()
			j.joined = append(j.joined, n)
			j.templates[n.ID] = ts
		},
		Templates: func(id string, ts []Template) {
			j.mu.Lock()
			defer j.mu.Unlock()
			j.templates[id] = ts
		},
	})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return reg, j, srv.URL
}

func TestRegisterHeartbeatAndTheirErrors(t *testing.T) {
	reg, j, url := start(t)
	ctx := context.Background()
	tpl := Template{Name: "minimal", Spec: nodeapi.TemplateSpec{ID: "0123", RootfsVolume: "templates/0123", Env: map[string]string{"A": "b"}, User: "user"}}
	c, err := Dial(url, "s3cret", DialOptions{Templates: func() []Template { return []Template{tpl} }})
	if err != nil {
		t.Fatal(err)
	}
	info := nodeapi.Info{VCPUs: 4, MemoryMB: 8192, Sandboxes: 2, Templates: []string{"0123"}, Pools: map[string]nodeapi.PoolStatus{"0123": {Size: 2, Ready: 1}}}

	if err := c.Heartbeat(ctx, "n1", info); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat before register: %v, want ErrUnknownNode", err)
	}
	if err := c.Register(ctx, "n1", "http://127.0.0.1:7071", info); err != nil {
		t.Fatal(err)
	}
	n, err := reg.Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Address != "http://127.0.0.1:7071" || n.Info.VCPUs != 4 || n.Info.Pools["0123"].Ready != 1 || len(n.Info.Templates) != 1 {
		t.Fatalf("registered node = %+v", n)
	}
	j.mu.Lock()
	if len(j.joined) != 1 || j.joined[0].ID != "n1" || len(j.templates["n1"]) != 1 || j.templates["n1"][0].Spec.Env["A"] != "b" {
		t.Fatalf("joined %+v, templates %+v", j.joined, j.templates)
	}
	j.mu.Unlock()
	info.Sandboxes = 3
	if err := c.Heartbeat(ctx, "n1", info); err != nil {
		t.Fatal(err)
	}
	if n, _ := reg.Get("n1"); n.Info.Sandboxes != 3 {
		t.Fatalf("heartbeat not recorded: %+v", n.Info)
	}
	if err := c.Register(ctx, "N 1", "http://127.0.0.1:7071", info); !errors.Is(err, cluster.ErrInvalid) {
		t.Fatalf("register with a bad id: %v, want ErrInvalid", err)
	}
	if _, _, err := reg.Remove("n1", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx, "n1", info); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("heartbeat of a lost node: %v, want ErrConflict", err)
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	reg, _, url := start(t)
	for _, token := range []string{"wrong", "s3cret-but-longer"} {
		c, err := Dial(url, token, DialOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Register(context.Background(), "n1", "http://127.0.0.1:7071", nodeapi.Info{})
		if err == nil || errors.Is(err, cluster.ErrUnknownNode) {
			t.Fatalf("register with token %q: %v, want refused", token, err)
		}
	}
	if nodes, _ := reg.List(); len(nodes) != 0 {
		t.Fatalf("a refused registration was recorded: %+v", nodes)
	}
	if _, err := Dial(url, "", DialOptions{}); err == nil {
		t.Fatal("Dial accepted an empty token")
	}
}

// A node given several replicas registers through the first, and when
// that one stops answering heartbeats through the next: the registry is
// the same, so the node stays known. Refusals of the registry are not
// passed on to another replica.
func TestReplicasFailOver(t *testing.T) {
	reg, _, url := start(t)
	ctx := context.Background()
	// A second "replica" over the same registry, and a dead address first.
	path, h := NewHandler(ServerConfig{Registry: reg, Token: "s3cret"})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	second := httptest.NewServer(mux)
	defer second.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	r, err := DialReplicas([]string{url, second.URL, deadURL}, "s3cret", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info := nodeapi.Info{VCPUs: 2}
	if err := r.Register(ctx, "n1", "http://127.0.0.1:7071", info); err != nil {
		t.Fatal(err)
	}
	// The first replica goes away: the heartbeat reaches the second.
	r.clients[0], err = Dial(deadURL, "s3cret", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info.Sandboxes = 5
	if err := r.Heartbeat(ctx, "n1", info); err != nil {
		t.Fatalf("heartbeat with the first replica gone: %v", err)
	}
	if n, _ := reg.Get("n1"); n.Info.Sandboxes != 5 {
		t.Fatalf("heartbeat not recorded: %+v", n.Info)
	}
	if r.cur != 1 {
		t.Fatalf("the answering replica is %d, want 1", r.cur)
	}
	// A refusal comes back as it is, with no other replica asked.
	if err := r.Heartbeat(ctx, "n2", info); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat of an unknown node: %v, want ErrUnknownNode", err)
	}
	// None answers: the error names each.
	r.clients[1] = r.clients[0]
	err = r.Heartbeat(ctx, "n1", info)
	if err == nil || !strings.Contains(err.Error(), deadURL) {
		t.Fatalf("heartbeat with no replica up: %v", err)
	}
}
