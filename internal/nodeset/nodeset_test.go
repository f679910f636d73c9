package nodeset

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi/cpapitest"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/store"
)

// The cluster's Nodes: a node the registry does not know, or that went
// silent, is unavailable; joins reach every subscriber, the past ones
// first, and a heartbeat joins a node only once.
func TestClusterNodesStatesAndJoins(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reg, err := cluster.New(cluster.Config{Store: st, Now: clock, HeartbeatTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nodes := New(reg, "token", "")
	defer nodes.Close()

	if _, err := nodes.Node("n1"); !errors.Is(err, controlplane.ErrNodeUnavailable) {
		t.Fatalf("unknown node: %v", err)
	}
	if got := nodes.State("n1"); got != cluster.Lost {
		t.Fatalf("state of an unknown node = %s", got)
	}
	n1, err := reg.Register("n1", "http://127.0.0.1:1", nodeapi.Info{})
	if err != nil {
		t.Fatal(err)
	}
	nodes.Join(n1)
	if nd, err := nodes.Node("n1"); err != nil || nd == nil {
		t.Fatalf("joined node: %v", err)
	}
	if got := nodes.State("n1"); got != cluster.Ready {
		t.Fatalf("state = %s", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	joins := nodes.Joins(ctx)
	if id := <-joins; id != "n1" {
		t.Fatalf("first join delivered %q", id)
	}
	// n2 registered through another replica: its heartbeat joins it, once.
	if _, err := reg.Register("n2", "http://127.0.0.1:2", nodeapi.Info{}); err != nil {
		t.Fatal(err)
	}
	nodes.Heard("n2")
	nodes.Heard("n2")
	nodes.Heard("n1")
	if id := <-joins; id != "n2" {
		t.Fatalf("heard node delivered %q", id)
	}
	select {
	case id := <-joins:
		t.Fatalf("a second join of %q for heartbeats of known nodes", id)
	case <-time.After(100 * time.Millisecond):
	}

	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	if _, err := nodes.Node("n1"); !errors.Is(err, controlplane.ErrNodeUnavailable) {
		t.Fatalf("silent node: %v", err)
	}
	cancel()
	for range joins {
	}
}

// newInProcessNodes is a registry on a store of its own and the cluster's
// nodes over it.
func newInProcessNodes(t *testing.T) (*cluster.Registry, *Set) {
	t.Helper()
	reg := cpapitest.NewRegistry(t)
	nodes := New(reg, "token", "")
	t.Cleanup(nodes.Close)
	return reg, nodes
}

// A node in the control plane's process is driven by calls: the node
// registered at its in-process address is the one added, and a node that
// claims that address without running here is unavailable.
func TestClusterNodesInProcess(t *testing.T) {
	reg, nodes := newInProcessNodes(t)
	type inProcess struct{ controlplane.Node }
	here := &inProcess{}
	nodes.AddLocal("here", here)
	for _, id := range []string{"here", "elsewhere"} {
		if _, err := reg.Register(id, cluster.InProcessAddress(id), nodeapi.Info{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := nodes.Node("here"); err != nil || got != controlplane.Node(here) {
		t.Fatalf("in-process node: %v, %v", got, err)
	}
	if _, err := nodes.Node("elsewhere"); !errors.Is(err, controlplane.ErrNodeUnavailable) {
		t.Fatalf("a node in-process elsewhere: %v, want unavailable", err)
	}
}

// The nodes routes show a node in this process as it is now, not as its
// last heartbeat said; a node elsewhere as its heartbeat said.
func TestOperatorViewShowsTheInProcessNodeNow(t *testing.T) {
	reg, nodes := newInProcessNodes(t)
	here := nodeapitest.NewFake("here")
	nodes.AddLocal("here", here)
	stale := nodeapi.Info{VCPUs: 1, Sandboxes: 7}
	if _, err := reg.Register("here", cluster.InProcessAddress("here"), stale); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register("there", "http://127.0.0.1:1", stale); err != nil {
		t.Fatal(err)
	}
	now, _ := here.Info(context.Background())
	view := nodes.OperatorView()
	list, err := view.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, n := range list {
		want := stale
		if n.ID == "here" {
			want = now
		}
		if n.Info.VCPUs != want.VCPUs || n.Info.Sandboxes != want.Sandboxes {
			t.Errorf("node %s shows %+v, want %+v", n.ID, n.Info, want)
		}
	}
	if n, err := view.Get("here"); err != nil || n.Info.VCPUs != now.VCPUs {
		t.Fatalf("get: %+v, %v", n, err)
	}
}
