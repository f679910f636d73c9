package clusterrpc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/cpapi/cpapitest"
	"github.com/space-platform/space/internal/nodeapi"
)

// serve serves svc on a test server with the cluster token "s3cret" and
// returns its URL.
func serve(t *testing.T, svc cpapi.ControlPlane) string {
	t.Helper()
	path, h := NewHandler(ServerConfig{ControlPlane: svc, Token: "s3cret"})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func start(t *testing.T) (*cluster.Registry, string) {
	t.Helper()
	reg := cpapitest.NewRegistry(t)
	return reg, serve(t, &cpapi.Service{Registry: reg})
}

// The contract over the network: the client of a served cpapi.Service,
// and the client of several replicas serving it, pass the suite the
// Service passes in process.
func TestConformance(t *testing.T) {
	t.Run("Client", func(t *testing.T) {
		cpapitest.Run(t, func(t *testing.T, svc *cpapi.Service) cpapi.ControlPlane {
			c, err := Dial(serve(t, svc), "s3cret", DialOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("Replicas", func(t *testing.T) {
		cpapitest.Run(t, func(t *testing.T, svc *cpapi.Service) cpapi.ControlPlane {
			r, err := DialReplicas([]string{serve(t, svc), serve(t, svc)}, "s3cret", DialOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			return r
		})
	})
}

func TestWrongTokenIsRefused(t *testing.T) {
	reg, url := start(t)
	for _, token := range []string{"wrong", "s3cret-but-longer"} {
		c, err := Dial(url, token, DialOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Register(context.Background(), "n1", "http://127.0.0.1:7071", nodeapi.Info{}, nil)
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
	reg, url := start(t)
	ctx := context.Background()
	// A second "replica" over the same registry, and a dead address first.
	secondURL := serve(t, &cpapi.Service{Registry: reg})
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	r, err := DialReplicas([]string{url, secondURL, deadURL}, "s3cret", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info := nodeapi.Info{VCPUs: 2}
	if err := r.Register(ctx, "n1", "http://127.0.0.1:7071", info, nil); err != nil {
		t.Fatal(err)
	}
	// The first replica goes away: the heartbeat reaches the second.
	r.clients[0], err = Dial(deadURL, "s3cret", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info.Sandboxes = 5
	if err := r.Heartbeat(ctx, "n1", info, nil); err != nil {
		t.Fatalf("heartbeat with the first replica gone: %v", err)
	}
	if n, _ := reg.Get("n1"); n.Info.Sandboxes != 5 {
		t.Fatalf("heartbeat not recorded: %+v", n.Info)
	}
	if r.cur != 1 {
		t.Fatalf("the answering replica is %d, want 1", r.cur)
	}
	// A refusal comes back as it is, with no other replica asked.
	if err := r.Heartbeat(ctx, "n2", info, nil); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat of an unknown node: %v, want ErrUnknownNode", err)
	}
	// None answers: the error names each.
	r.clients[1] = r.clients[0]
	err = r.Heartbeat(ctx, "n1", info, nil)
	if err == nil || !strings.Contains(err.Error(), deadURL) {
		t.Fatalf("heartbeat with no replica up: %v", err)
	}
}
