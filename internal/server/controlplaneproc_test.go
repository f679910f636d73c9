package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func startReplica(t *testing.T, url, token string) (*Server, error) {
	t.Helper()
	cfg := DefaultControlPlaneConfig()
	cfg.Store, cfg.DataDir, cfg.ClusterToken = url, t.TempDir(), token
	cfg.Listen, cfg.E2BListen, cfg.ProxyListen = "127.0.0.1:0", "", ""
	cfg.Progress = nil
	s, err := StartControlPlane(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	}
	return s, err
}

// Every replica holding the cluster token writes the admin key the first
// one minted; one with another token is refused, as is a node presenting
// it. A node that registers is listed, and the templates it holds are
// ready cluster-wide.
func TestControlPlaneReplicasShareTheBootstrap(t *testing.T) {
	url := pgtest.Start(t)
	first, err := startReplica(t, url, "token-a")
	if err != nil {
		t.Fatal(err)
	}
	second, err := startReplica(t, url, "token-a")
	if err != nil {
		t.Fatal(err)
	}
	if first.AdminKey == "" || second.AdminKey != first.AdminKey {
		t.Fatalf("admin keys %q and %q, want one, shared", first.AdminKey, second.AdminKey)
	}
	for _, s := range []*Server{first, second} {
		data, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "admin.key"))
		if err != nil || strings.TrimSpace(string(data)) != first.AdminKey {
			t.Fatalf("admin.key of %s = %q, %v", s.URL, data, err)
		}
	}
	if _, err := startReplica(t, url, "token-b"); err == nil || !strings.Contains(err.Error(), "another cluster token") {
		t.Fatalf("replica with another token: %v", err)
	}

	ctx := context.Background()
	wrong, err := clusterrpc.Dial(first.URL, "token-b", clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Register(ctx, "n1", "http://127.0.0.1:1", nodeapi.Info{}, nil); err == nil {
		t.Fatal("a node with the wrong token registered")
	}
	spec := nodeapi.TemplateSpec{ID: "0123456789abcdef0123456789abcdef", RootfsVolume: "templates/0123456789abcdef0123456789abcdef"}
	node, err := clusterrpc.Dial(first.URL, "token-a", clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := []cpapi.Template{{Name: "minimal", Spec: spec}}
	if err := node.Heartbeat(ctx, "n1", nodeapi.Info{}, held); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("heartbeat before registering: %v", err)
	}
	// Port 1: nothing answers there, which the control plane only finds
	// when it calls the node.
	if err := node.Register(ctx, "n1", "http://127.0.0.1:1", nodeapi.Info{VCPUs: 2, MemoryMB: 4096, Templates: []string{spec.ID}}, held); err != nil {
		t.Fatal(err)
	}
	// Through the other replica: the registry and the catalog are the
	// store's.
	api := client.New(second.URL, second.AdminKey)
	nodes, err := api.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].ID != "n1" || nodes[0].State != "ready" || nodes[0].Address != "http://127.0.0.1:1" {
		t.Fatalf("nodes = %+v, %v", nodes, err)
	}
	tpl, err := api.GetTemplate(ctx, "minimal")
	if err != nil || tpl.State != apiv1.TemplateReady || tpl.ID != spec.ID || !tpl.Builtin {
		t.Fatalf("template = %+v, %v", tpl, err)
	}
	if _, err := api.GetTemplate(ctx, "base"); err == nil {
		t.Fatal("base is held by no node, yet found")
	}
	// A build through one replica is recorded in the store: the other
	// shows it, failed here, since the node reported no free memory (and
	// nothing answers at its address).
	mine, err := api.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "mine", Recipe: "name: mine\nfrom: template:minimal\n"})
	if err != nil || mine.State != apiv1.TemplateBuilding {
		t.Fatalf("template build through the cluster: %+v, %v", mine, err)
	}
	firstAPI := client.New(first.URL, first.AdminKey)
	deadline := time.Now().Add(time.Minute)
	for mine.State == apiv1.TemplateBuilding && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if mine, err = firstAPI.GetTemplate(ctx, "mine"); err != nil {
			t.Fatal(err)
		}
	}
	if mine.State != apiv1.TemplateFailed || !strings.Contains(mine.Reason, "no node to build on") {
		t.Fatalf("a build on a node that does not answer, through the other replica: %+v", mine)
	}
	// Cordoned, the node holds the template but no schedulable one does.
	if _, err := api.CordonNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if tpl, err := api.GetTemplate(ctx, "minimal"); err != nil || tpl.State == apiv1.TemplateReady {
		t.Fatalf("template on a cordoned node only = %+v, %v", tpl, err)
	}
}
