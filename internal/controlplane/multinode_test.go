package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// clusterNode is a fakeNode that also creates sandboxes and keeps pools,
// as a node of a cluster does.
type clusterNode struct {
	*fakeNode
	pmu   sync.Mutex
	pools map[string]int // template id → size set
	// onSweep, if set, runs in Sweep (a test's hook).
	onSweep func(keep []string)
}

func newClusterNode() *clusterNode {
	return &clusterNode{fakeNode: newFakeNode(), pools: map[string]int{}}
}

func (c *clusterNode) Create(_ context.Context, req nodeapi.CreateRequest) error {
	c.record("create " + req.Spec.ID)
	c.mu.Lock()
	c.alive[req.Spec.ID] = true
	c.volumes[filepath.Join("sandboxes", req.Spec.ID)] = true
	c.mu.Unlock()
	return nil
}

func (c *clusterNode) Claim(context.Context, nodeapi.ClaimRequest) (nodeapi.ClaimResult, error) {
	return nodeapi.ClaimResult{}, nil
}

func (c *clusterNode) Info(context.Context) (nodeapi.Info, error) { return nodeapi.Info{}, nil }

func (c *clusterNode) SetPool(_ context.Context, req nodeapi.PoolRequest) error {
	c.record(fmt.Sprintf("setpool %s %d", req.Template.ID, req.Size))
	c.pmu.Lock()
	c.pools[req.Template.ID] = req.Size
	c.pmu.Unlock()
	return nil
}

func (c *clusterNode) Pool(_ context.Context, templateID string) (nodeapi.PoolStatus, error) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return nodeapi.PoolStatus{Size: c.pools[templateID], Ready: c.pools[templateID]}, nil
}

func (c *clusterNode) pool(templateID string) int {
	st, _ := c.Pool(context.Background(), templateID)
	return st.Size
}

func (c *clusterNode) Sweep(_ context.Context, keep []string) error {
	slices.Sort(keep)
	c.record("sweep " + strings.Join(keep, ","))
	if c.onSweep != nil {
		c.onSweep(keep)
	}
	return nil
}

func (c *clusterNode) callCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// testNodes is a Nodes of fake nodes: Place takes them in turn, a node's
// state is set by the test, and joins are what the test sends.
type testNodes struct {
	mu     sync.Mutex
	nodes  map[string]*clusterNode
	order  []string
	state  map[string]cluster.State
	next   int
	placed []string
	joins  chan string
}

func newTestNodes(ids ...string) *testNodes {
	tn := &testNodes{nodes: map[string]*clusterNode{}, state: map[string]cluster.State{}, joins: make(chan string, 16)}
	for _, id := range ids {
		tn.add(id)
	}
	return tn
}

func (tn *testNodes) add(id string) *clusterNode {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	n := newClusterNode()
	tn.nodes[id], tn.state[id] = n, cluster.Ready
	tn.order = append(tn.order, id)
	return n
}

func (tn *testNodes) get(id string) *clusterNode {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.nodes[id]
}

func (tn *testNodes) set(id string, st cluster.State) {
	tn.mu.Lock()
	tn.state[id] = st
	tn.mu.Unlock()
}

func (tn *testNodes) Node(id string) (Node, error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	n, ok := tn.nodes[id]
	if !ok || tn.state[id] == cluster.Unreachable || tn.state[id] == cluster.Lost {
		return nil, fmt.Errorf("node %q: %w", id, ErrNodeUnavailable)
	}
	return n, nil
}

func (tn *testNodes) Place(req cluster.PlaceRequest) (string, error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if req.Node != "" {
		// Pinned (its volumes live there), as the registry places it.
		if tn.state[req.Node] == cluster.Ready {
			tn.placed = append(tn.placed, req.Node)
			return req.Node, nil
		}
		return "", &cluster.CapacityError{Request: req, Nodes: len(tn.order)}
	}
	for range tn.order {
		id := tn.order[tn.next%len(tn.order)]
		tn.next++
		if tn.state[id] == cluster.Ready {
			tn.placed = append(tn.placed, id)
			return id, nil
		}
	}
	return "", &cluster.CapacityError{Request: req, Nodes: len(tn.order)}
}

// Runtimes: the fake nodes run gVisor alone.
func (tn *testNodes) Runtimes(string) (map[string]string, error) { return nil, nil }

func (tn *testNodes) State(id string) cluster.State {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if st, ok := tn.state[id]; ok {
		return st
	}
	return cluster.Lost
}

func (tn *testNodes) Joins(ctx context.Context) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case id := <-tn.joins:
				select {
				case out <- id:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// newClusterCP is a control plane over nodes, on a fresh store holding
// sandboxes (as a restart finds them) and snapshots.
func newClusterCP(t *testing.T, nodes Nodes, sandboxes []Sandbox, snaps ...Snapshot) *ControlPlane {
	t.Helper()
	cp := newTestCPWith(t, Config{Nodes: nodes}, t.TempDir(), nil, sandboxes...)
	for _, s := range snaps {
		if err := cp.cfg.Store.Put(snapshotBucket, snapshotKey(s.SandboxID, s.Name), s); err != nil {
			t.Fatal(err)
		}
	}
	return cp
}

func waitRunning(t *testing.T, cp *ControlPlane, id string) Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cp.Wait(ctx, id, apiv1.StateRunning)
	if err != nil {
		t.Fatalf("wait for %s running: %v", id, err)
	}
	return s
}

var createReq = apiv1.CreateSandboxRequest{Template: "tpl", VCPUs: 1, MemoryMB: 256, TimeoutS: 3600}

// threeRunning creates one sandbox on each of n1, n2, n3.
func threeRunning(t *testing.T) (*ControlPlane, *testNodes, map[string]Sandbox) {
	t.Helper()
	tn := newTestNodes("n1", "n2", "n3")
	cp, on := runningOnEach(t, newClusterCP(t, tn, nil))
	return cp, tn, on
}

// runningOnEach creates a sandbox on each of cp's three nodes.
func runningOnEach(t *testing.T, cp *ControlPlane) (*ControlPlane, map[string]Sandbox) {
	t.Helper()
	on := map[string]Sandbox{}
	for range 3 {
		s, err := cp.Create(project.Everything, createReq)
		if err != nil {
			t.Fatal(err)
		}
		s = waitRunning(t, cp, s.ID)
		on[s.Node] = s
	}
	return cp, on
}

// Creates go where Place says, and every operation on a sandbox reaches its
// node and no other.
func TestCreatesArePlacedAndOperationsReachTheirNode(t *testing.T) {
	cp, tn, on := threeRunning(t)
	for _, id := range []string{"n1", "n2", "n3"} {
		s, ok := on[id]
		if !ok {
			t.Fatalf("no sandbox placed on %s: %v", id, on)
		}
		if got := tn.get(id).called("create " + s.ID); got != 1 {
			t.Fatalf("%s created %d times on %s", s.ID, got, id)
		}
		if v := cp.View(s); v.Node != id || v.NodeState != "ready" {
			t.Fatalf("%s shows node %q (%q); want %s, ready", s.ID, v.Node, v.NodeState, id)
		}
	}
	ctx := context.Background()
	s2 := on["n2"]
	if _, err := cp.Pause(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Resume(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Suspend(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Resume(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{"pause ", "resume ", "suspend ", "resumefrom "} {
		if tn.get("n2").called(call+s2.ID) != 1 {
			t.Fatalf("n2 did not get %q%s", call, s2.ID)
		}
		for _, other := range []string{"n1", "n3"} {
			if n := tn.get(other).called(call + s2.ID); n != 0 {
				t.Fatalf("%s got %q%s, which is n2's", other, call, s2.ID)
			}
		}
	}
	if err := cp.Delete(ctx, on["n3"].ID); err != nil {
		t.Fatal(err)
	}
	if tn.get("n3").called("destroy "+on["n3"].ID) != 1 || tn.get("n1").called("destroy ") != 0 {
		t.Fatal("delete did not destroy on the sandbox's node only")
	}
}

// A branch and a sandbox started from a snapshot run on the node that
// holds the capture; a restore in place across nodes is refused.
func TestBranchAndSnapshotStayOnTheSourcesNode(t *testing.T) {
	cp, tn, on := threeRunning(t)
	ctx := context.Background()
	src := on["n2"]
	branches, err := cp.Branch(ctx, src.ID, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range branches {
		b = waitRunning(t, cp, b.ID)
		if b.Node != "n2" || b.Source.Node != "n2" {
			t.Fatalf("branch %s on node %q (capture on %q); want n2", b.ID, b.Node, b.Source.Node)
		}
		if tn.get("n2").called("resumefrom "+b.ID) != 1 {
			t.Fatalf("branch %s was not restored on n2", b.ID)
		}
	}
	snap, err := cp.CreateSnapshot(ctx, src.ID, "s")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Node != "n2" || tn.get("n2").called("capture "+src.ID) != 2 {
		t.Fatalf("snapshot on node %q; want n2, captured there", snap.Node)
	}
	from, err := cp.Create(project.Everything, apiv1.CreateSandboxRequest{Snapshot: src.ID + "/s", VCPUs: 1, MemoryMB: 256, TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	from = waitRunning(t, cp, from.ID)
	if from.Node != "n2" || tn.get("n2").called("resumefrom "+from.ID) != 1 {
		t.Fatalf("sandbox from the snapshot on node %q; want n2", from.Node)
	}
	placed := len(tn.placed)
	if placed != 3 {
		t.Fatalf("Place was asked %d times; only the 3 creates from a template place", placed)
	}
	_, err = cp.Restore(ctx, project.Everything, on["n1"].ID, src.ID+"/s")
	var stateErr *StateError
	if !errors.As(err, &stateErr) {
		t.Fatalf("restore of n2's snapshot into n1's sandbox: %v; want a StateError", err)
	}
	if got := mustGet(t, cp, on["n1"].ID); got.State != apiv1.StateRunning {
		t.Fatalf("refused restore left the sandbox %s", got.State)
	}
	// Restoring on its own node works.
	if _, err := cp.Restore(ctx, project.Everything, src.ID, "s"); err != nil {
		t.Fatal(err)
	}
}

// A node that does not answer: its sandboxes show it, their operations are
// refused with ErrNodeUnavailable and change nothing, and the other nodes'
// sandboxes are unaffected.
func TestUnavailableNodeRefusesAndKeepsItsSandboxes(t *testing.T) {
	cp, tn, on := threeRunning(t)
	ctx := context.Background()
	tn.set("n2", cluster.Unreachable)
	s2 := on["n2"]
	if v := cp.View(mustGet(t, cp, s2.ID)); v.NodeState != "unreachable" || v.Node != "n2" {
		t.Fatalf("sandbox on an unreachable node shows %q on %q", v.NodeState, v.Node)
	}
	before := tn.get("n2").callCount()
	ops := map[string]func() error{
		"pause":    func() error { _, err := cp.Pause(ctx, s2.ID); return err },
		"suspend":  func() error { _, err := cp.Suspend(ctx, s2.ID); return err },
		"snapshot": func() error { _, err := cp.CreateSnapshot(ctx, s2.ID, "x"); return err },
		"branch":   func() error { _, err := cp.Branch(ctx, s2.ID, 1, 0); return err },
		"network":  func() error { _, err := cp.SetNetwork(ctx, s2.ID, apiv1.NetworkPolicy{}); return err },
		"running":  func() error { _, err := cp.Running(ctx, s2.ID); return err },
		"delete":   func() error { return cp.Delete(ctx, s2.ID) },
	}
	for name, op := range ops {
		err := op()
		var nu *NodeUnavailableError
		if !errors.Is(err, ErrNodeUnavailable) || !errors.As(err, &nu) || nu.Node != "n2" || nu.State != "unreachable" {
			t.Fatalf("%s on an unreachable node: %v; want a NodeUnavailableError naming n2", name, err)
		}
		if !strings.Contains(err.Error(), "n2") || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%s: message %q does not name the node and its state", name, err)
		}
		if got := mustGet(t, cp, s2.ID); got.State != apiv1.StateRunning || got.Reason != "" {
			t.Fatalf("after a refused %s the sandbox is %s (%q)", name, got.State, got.Reason)
		}
	}
	if after := tn.get("n2").callCount(); after != before {
		t.Fatalf("the unreachable node got %d calls", after-before)
	}
	if _, err := cp.Pause(ctx, on["n1"].ID); err != nil {
		t.Fatalf("n1's sandbox: %v", err)
	}
	if v := cp.View(mustGet(t, cp, on["n3"].ID)); v.NodeState != "ready" {
		t.Fatalf("n3's sandbox shows %q", v.NodeState)
	}
	if n := len(cp.List(project.Everything, Filter{})); n != 3 {
		t.Fatalf("list shows %d sandboxes; want all 3", n)
	}
	tn.set("n2", cluster.Lost)
	if v := cp.View(mustGet(t, cp, s2.ID)); v.NodeState != "lost" {
		t.Fatalf("sandbox on a lost node shows %q", v.NodeState)
	}
	tn.set("n2", cluster.Ready)
	if _, err := cp.Pause(ctx, s2.ID); err != nil {
		t.Fatalf("once its node is back: %v", err)
	}
}

// A create placed on a node while a reconcile of that node sweeps it is
// not swept away: the keep list was computed before the create's record
// existed, so the create's node call waits for the sweep to end.
func TestReconcileSweepSparesACreateItRaces(t *testing.T) {
	tn := newTestNodes("n1")
	n1 := tn.get("n1")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	n1.onSweep = func(keep []string) {
		once.Do(func() { close(entered) })
		<-release
		// What a node's sweep does: everything not kept goes.
		n1.mu.Lock()
		defer n1.mu.Unlock()
		for id := range n1.alive {
			if !slices.Contains(keep, id) {
				delete(n1.alive, id)
			}
		}
	}
	cp := newClusterCP(t, tn, nil)
	swept := make(chan error, 1)
	go func() { swept <- cp.ReconcileNode(context.Background(), "n1") }()
	<-entered
	s, err := cp.Create(project.Everything, createReq)
	if err != nil {
		t.Fatal(err)
	}
	// Time for the create's node call to land inside the sweep, as it
	// did before creates waited for a sweep of their node.
	time.Sleep(300 * time.Millisecond)
	close(release)
	if err := <-swept; err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cp, s.ID)
	n1.mu.Lock()
	alive := n1.alive[s.ID]
	n1.mu.Unlock()
	if !alive {
		t.Fatalf("the sweep removed %s, created while it ran; node calls %v", s.ID, n1.calls)
	}
}

// Reconciling one node reads and changes only that node's records, and
// sweeps that node only.
func TestReconcileNodeTouchesOnlyItsRecords(t *testing.T) {
	tn := newTestNodes("n1", "n2")
	n1, n2 := tn.get("n1"), tn.get("n2")
	a, b := sandbox("a", apiv1.StateSuspended), sandbox("b", apiv1.StateRunning)
	a.Node, a.Image = "n1", suspendImage("a")
	b.Node = "n2"
	n1.images[suspendImage("a")] = true
	n1.images["orphan/suspend"] = true
	n1.volumes["sandboxes/a"] = true
	// On n2, an image named like n1's sandbox's is not owned by n2's
	// records; b lost its runtime, its disk is there.
	n2.images[suspendImage("a")] = true
	n2.volumes["sandboxes/b"] = true
	snap := Snapshot{ID: "sn", Name: "s", SandboxID: "a", Node: "n1", Volume: "snapshots/a/sn", Image: snapshotImage("a", "sn"),
		TemplateID: "tpl", CreatedAt: time.Now()}
	n1.images[snap.Image], n1.volumes[snap.Volume] = true, true
	n2.images[snap.Image], n2.volumes[snap.Volume] = true, true
	cp := newClusterCP(t, tn, []Sandbox{a, b}, snap)
	if n1.callCount() != 0 || n2.callCount() != 0 {
		t.Fatal("Recover of a cluster touched a node; nodes are reconciled as they join")
	}

	if err := cp.ReconcileNode(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	if n := n2.callCount(); n != 0 {
		t.Fatalf("reconcile of n1 made %d calls on n2", n)
	}
	if got := mustGet(t, cp, "b"); got.State != apiv1.StateRunning || got.Recovered != "" {
		t.Fatalf("reconcile of n1 changed n2's sandbox: %s %q", got.State, got.Recovered)
	}
	if n1.hasImage("orphan/suspend") || !n1.hasImage(suspendImage("a")) || !n1.hasImage(snap.Image) || !n1.hasVolume(snap.Volume) {
		t.Fatal("n1's sweep removed what its records own or kept an orphan")
	}
	if n1.called("sweep a") != 1 {
		t.Fatalf("n1 swept keeping other than its sandbox: %v", n1.calls)
	}

	n1calls := n1.callCount()
	if err := cp.ReconcileNode(context.Background(), "n2"); err != nil {
		t.Fatal(err)
	}
	if n := n1.callCount(); n != n1calls {
		t.Fatalf("reconcile of n2 made %d calls on n1", n-n1calls)
	}
	if got := mustGet(t, cp, "b"); got.State != apiv1.StateRunning || got.Recovered == "" || n2.called("boot b") != 1 {
		t.Fatalf("b was not rebooted on n2: %s %q", got.State, got.Recovered)
	}
	if n2.hasImage(suspendImage("a")) || n2.hasImage(snap.Image) || n2.hasVolume(snap.Volume) {
		t.Fatal("n2 kept images or captures that only n1's records own")
	}
	if got := mustGet(t, cp, "a"); got.State != apiv1.StateSuspended || got.Image != suspendImage("a") {
		t.Fatalf("reconcile of n2 changed n1's sandbox: %s %q", got.State, got.Image)
	}
	if n2.called("sweep b") != 1 {
		t.Fatalf("n2 swept keeping other than its sandbox: %v", n2.calls)
	}
}

func TestSplitPool(t *testing.T) {
	for _, c := range []struct {
		size, k int
		want    []int
	}{{2, 3, []int{1, 1, 0}}, {5, 2, []int{3, 2}}, {4, 2, []int{2, 2}}, {0, 2, []int{0, 0}}, {3, 1, []int{3}}, {3, 0, []int{}}} {
		if got := splitPool(c.size, c.k); !slices.Equal(got, c.want) {
			t.Errorf("splitPool(%d, %d) = %v; want %v", c.size, c.k, got, c.want)
		}
	}
}

// A pool size is the cluster's: split over the ready nodes, again when one
// joins, summed in the status.
func TestPoolIsSplitOverTheNodes(t *testing.T) {
	tn := newTestNodes("n1", "n2", "n3")
	cp := newClusterCP(t, tn, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cp.followNodes(ctx)
	for _, id := range []string{"n1", "n2", "n3"} {
		tn.joins <- id
	}
	waitFor(t, func() bool { return len(cp.fleet.nodes()) == 3 })
	st, err := cp.SetPoolSize("tpl", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{tn.get("n1").pool("tpl"), tn.get("n2").pool("tpl"), tn.get("n3").pool("tpl")}; !slices.Equal(got, []int{1, 1, 0}) {
		t.Fatalf("pool of 2 over 3 nodes: %v; want 1, 1, 0", got)
	}
	if st.Size != 2 || cp.PoolStatus("tpl").Ready != 2 {
		t.Fatalf("pool status %+v; want the sum, 2", st)
	}
	// n1 stops answering and n4 joins: the pool is split again over the
	// ready nodes.
	tn.set("n1", cluster.Unreachable)
	n4 := tn.add("n4")
	tn.joins <- "n4"
	waitFor(t, func() bool { return n4.called("setpool tpl") > 0 })
	if got := []int{tn.get("n2").pool("tpl"), tn.get("n3").pool("tpl"), n4.pool("tpl")}; !slices.Equal(got, []int{1, 1, 0}) {
		t.Fatalf("after n1 went away and n4 joined: n2, n3, n4 hold %v; want 1, 1, 0", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Events of a node are taken for its own sandboxes only.
func TestEventOfAnotherNodeIsIgnored(t *testing.T) {
	cp, _, on := threeRunning(t)
	cp.nodeEvent("n1", nodeapi.Event{Type: nodeapi.EventExit, Sandbox: on["n2"].ID, Reason: "killed"})
	time.Sleep(50 * time.Millisecond)
	if got := mustGet(t, cp, on["n2"].ID); got.State != apiv1.StateRunning {
		t.Fatalf("an exit reported by n1 failed n2's sandbox: %s", got.State)
	}
	cp.nodeEvent("n2", nodeapi.Event{Type: nodeapi.EventExit, Sandbox: on["n2"].ID, Reason: "killed"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, _ := cp.Wait(ctx, on["n2"].ID, apiv1.StateFailed); got.State != apiv1.StateFailed {
		t.Fatalf("an exit reported by its node left the sandbox %s", got.State)
	}
}

// The reaper leaves the sandboxes of a node that does not answer alone
// (it would fail on them every tick) and times out the others; once the
// node is back, the timeout fires there too.
func TestReaperWaitsForUnavailableNodes(t *testing.T) {
	var logs strings.Builder
	var lmu sync.Mutex
	tn := newTestNodes("n1", "n2", "n3")
	cp, on := runningOnEach(t, newTestCPWith(t, Config{Nodes: tn, Logger: slog.New(slog.NewTextHandler(lockedWriter{&lmu, &logs}, nil))}, t.TempDir(), nil))
	tn.set("n2", cluster.Unreachable)
	cp.mu.Lock()
	for _, r := range cp.sandboxes {
		r.ExpiresAt = time.Now().Add(-time.Second)
	}
	cp.mu.Unlock()
	ctx := context.Background()
	for _, id := range []string{"n1", "n3"} {
		cp.reap(ctx)
		waitState(t, cp, on[id].ID, apiv1.StateStopped)
	}
	for range 3 {
		cp.reap(ctx)
	}
	time.Sleep(50 * time.Millisecond) // chores run in the background
	if got := mustGet(t, cp, on["n2"].ID); got.State != apiv1.StateRunning {
		t.Fatalf("the unreachable node's sandbox is %s (%q)", got.State, got.Reason)
	}
	lmu.Lock()
	if strings.Contains(logs.String(), on["n2"].ID) {
		t.Fatalf("the reaper worked on the unreachable node's sandbox:\n%s", logs.String())
	}
	lmu.Unlock()

	tn.set("n2", cluster.Ready)
	cp.reap(ctx)
	waitState(t, cp, on["n2"].ID, apiv1.StateStopped)
}

// unanswering is a node whose Destroy does not reach it (it went away
// before the registry noticed).
type unanswering struct{ *fakeNode }

func (unanswering) Destroy(context.Context, string) error {
	return fmt.Errorf("node local does not answer: %w", ErrNodeUnavailable)
}

// A stop the node did not answer leaves the sandbox stopping, not failed:
// the node's reconcile finishes it when the node is back.
func TestStopOnUnansweringNodeStaysStopping(t *testing.T) {
	fn := newFakeNode()
	fn.alive["a"] = true
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", unanswering{fn})}, t.TempDir(), nil, sandbox("a", apiv1.StateRunning))
	err := cp.Delete(context.Background(), "a")
	if !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("delete on a node that does not answer: %v, want ErrNodeUnavailable", err)
	}
	if got := mustGet(t, cp, "a"); got.State != apiv1.StateStopping {
		t.Fatalf("after the unanswered stop the sandbox is %s (%q), want stopping", got.State, got.Reason)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
