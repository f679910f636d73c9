package controlplane

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// replicaNode is the fake node two replicas share. It also starts
// sandboxes (optionally holding a start until the test lets it go) and
// notices two operations on one sandbox overlapping, which the
// cross-replica lock must prevent.
type replicaNode struct {
	*fakeNode
	busy     sync.Map // sandbox id → *atomic.Int32 of calls in progress
	overlaps atomic.Int32
	// hold, when set, blocks the first start of each sandbox until it is
	// closed.
	hold    chan struct{}
	started sync.Map // sandbox id → bool: a start was entered
}

func newReplicaNode() *replicaNode { return &replicaNode{fakeNode: newFakeNode()} }

// enter marks a call on id in progress for a little while, so that an
// unserialised second call overlaps it.
func (n *replicaNode) enter(id string) func() {
	c, _ := n.busy.LoadOrStore(id, new(atomic.Int32))
	if c.(*atomic.Int32).Add(1) > 1 {
		n.overlaps.Add(1)
	}
	time.Sleep(5 * time.Millisecond)
	return func() { c.(*atomic.Int32).Add(-1) }
}

func (n *replicaNode) Create(ctx context.Context, req nodeapi.CreateRequest) error {
	id := req.Spec.ID
	defer n.enter(id)()
	n.record("create " + id)
	if _, again := n.started.LoadOrStore(id, true); !again && n.hold != nil {
		select {
		case <-n.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.mu.Lock()
	n.alive[id] = true
	n.volumes["sandboxes/"+id] = true
	n.mu.Unlock()
	return nil
}

func (n *replicaNode) Claim(context.Context, nodeapi.ClaimRequest) (nodeapi.ClaimResult, error) {
	return nodeapi.ClaimResult{}, nil
}

func (n *replicaNode) Pause(ctx context.Context, id string) error {
	defer n.enter(id)()
	return n.fakeNode.Pause(ctx, id)
}

func (n *replicaNode) Resume(ctx context.Context, id string) error {
	defer n.enter(id)()
	return n.fakeNode.Resume(ctx, id)
}

func (n *replicaNode) Destroy(ctx context.Context, id string) error {
	defer n.enter(id)()
	return n.fakeNode.Destroy(ctx, id)
}

// replica is one control plane on the shared database; kill ends it as
// kill -9 would: its store goes (and with it its locks' sessions), nothing
// is resigned.
type replica struct {
	*ControlPlane
	st   store.Store
	stop context.CancelFunc
}

func (r *replica) kill() { r.st.Close() }

// newReplica starts a replica (Recover and Run) on the database url.
func newReplica(t *testing.T, url string, n *replicaNode, name string) *replica {
	t.Helper()
	st, err := store.OpenURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	cp := New(Config{
		Store: st, Nodes: OneNode("local", n), LocalNode: "local", Templates: fakeTemplates{}, ReplicaID: name, LeaseTTL: 1500 * time.Millisecond,
		Defaults: Defaults{VCPUs: 1, MemoryMB: 256, DiskMB: 64, TimeoutS: 3600, Retention: time.Hour},
	})
	if err := cp.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cp.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		st.Close()
	})
	return &replica{ControlPlane: cp, st: st, stop: cancel}
}

func waitUntil(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitState(t *testing.T, cp *ControlPlane, id, state string) Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := cp.Wait(ctx, id, state)
	if err != nil {
		t.Fatalf("wait for %s %s: %v (state %s, reason %q)", id, state, err, s.State, s.Reason)
	}
	return s
}

// twoReplicasCreate starts replicas a and b on a new database and creates
// a sandbox through a.
func twoReplicasCreate(t *testing.T) (*replicaNode, *replica, *replica, Sandbox) {
	t.Helper()
	url := pgtest.Start(t)
	n := newReplicaNode()
	a, b := newReplica(t, url, n, "a"), newReplica(t, url, n, "b")
	sb, err := a.Create(project.Everything, apiv1.CreateSandboxRequest{Template: "tpl"})
	if err != nil {
		t.Fatal(err)
	}
	return n, a, b, sb
}

// A sandbox created through one replica is seen, waited on and operated
// on through the other, and a change made on either shows on both.
func TestReplicasShareRecords(t *testing.T) {
	_, a, b, sb := twoReplicasCreate(t)
	if got, err := b.Get(project.Everything, sb.ID); err != nil || got.ID != sb.ID {
		t.Fatalf("Get through b right after the create through a: %+v, %v", got, err)
	}
	waitState(t, b.ControlPlane, sb.ID, apiv1.StateRunning)
	if l := b.List(project.Everything, Filter{State: apiv1.StateRunning}); len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("List through b = %+v", l)
	}
	if _, err := b.Pause(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Get(project.Everything, sb.ID); got.State != apiv1.StatePaused {
		t.Fatalf("a sees %s after a pause through b", got.State)
	}
	// a's cache follows b's change without a Get, through the store's
	// notifications.
	waitUntil(t, "a's cache sees the pause", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		r := a.sandboxes[sb.ID]
		return r != nil && r.State == apiv1.StatePaused
	})
	// A write that takes no lifecycle lock (SetTimeout) through a replica
	// whose cache is behind does not undo the other's change.
	a.mu.Lock()
	a.sandboxes[sb.ID].State = apiv1.StateRunning // as if the notification were late
	a.mu.Unlock()
	if _, err := a.SetTimeout(sb.ID, 600); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Get(project.Everything, sb.ID); got.State != apiv1.StatePaused || got.TimeoutS != 600 {
		t.Fatalf("after SetTimeout through a stale replica: %s, timeout %d; want paused, 600", got.State, got.TimeoutS)
	}
	if _, err := a.Resume(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(project.Everything, sb.ID); err == nil {
		t.Fatal("a still finds the sandbox b deleted")
	}
	if l := a.List(project.Everything, Filter{}); len(l) != 0 {
		t.Fatalf("a still lists %+v", l)
	}
}

// Pauses, resumes and deletes of one sandbox through both replicas at once
// never run on the node at the same time, and the sandbox is destroyed
// once.
func TestReplicasSerializeOperations(t *testing.T) {
	n, a, b, sb := twoReplicasCreate(t)
	waitState(t, a.ControlPlane, sb.ID, apiv1.StateRunning)
	var wg sync.WaitGroup
	for i := range 16 {
		cp := a.ControlPlane
		if i%2 == 1 {
			cp = b.ControlPlane
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				// Either may find the sandbox in the wrong state: that is
				// a refusal, not an overlap.
				_, _ = cp.Pause(context.Background(), sb.ID)
				_, _ = cp.Resume(context.Background(), sb.ID)
			}
		}()
	}
	wg.Wait()
	if n.called("pause ") == 0 || n.called("resume ") == 0 {
		t.Fatalf("no pause or resume ran: %d, %d", n.called("pause "), n.called("resume "))
	}
	for _, cp := range []*ControlPlane{a.ControlPlane, b.ControlPlane} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cp.Delete(context.Background(), sb.ID)
		}()
	}
	wg.Wait()
	if got := n.overlaps.Load(); got != 0 {
		t.Fatalf("%d node calls on one sandbox overlapped across replicas", got)
	}
	if got := n.called("destroy " + sb.ID); got != 1 {
		t.Fatalf("destroyed %d times by two concurrent deletes, want once", got)
	}
	for _, cp := range []*ControlPlane{a.ControlPlane, b.ControlPlane} {
		if _, err := cp.Get(project.Everything, sb.ID); err == nil {
			t.Fatal("the deleted sandbox is still found")
		}
	}
}

// Exactly one replica leads; when it dies without resigning, the other
// leads within the lease's ttl and a renewal, and the dead one stops
// believing it leads.
func TestReplicasLeaderLease(t *testing.T) {
	url := pgtest.Start(t)
	n := newReplicaNode()
	a, b := newReplica(t, url, n, "a"), newReplica(t, url, n, "b")
	waitUntil(t, "a leader", 5*time.Second, func() bool { return a.Leading() || b.Leading() })
	for range 50 {
		if a.Leading() == b.Leading() {
			t.Fatalf("leading: a %v, b %v; want exactly one", a.Leading(), b.Leading())
		}
		time.Sleep(20 * time.Millisecond)
	}
	leader, other := a, b
	if b.Leading() {
		leader, other = b, a
	}
	leader.kill()
	began := time.Now()
	waitUntil(t, "the other replica leads", 1500*time.Millisecond+time.Second+time.Second, other.Leading)
	t.Logf("took over after %s", time.Since(began))
	waitUntil(t, "the dead leader stops leading", 1500*time.Millisecond, func() bool { return !leader.Leading() })

	// A clean stop resigns: the other takes over at once, not after a ttl.
	c := newReplica(t, url, n, "c")
	time.Sleep(500 * time.Millisecond)
	if c.Leading() {
		t.Fatal("a new replica leads while the leader is alive")
	}
	other.stop()
	waitUntil(t, "the resigned lease taken over", time.Second, c.Leading)
}

// A sandbox's timeout fires once although both replicas run their loops.
func TestReplicasTimeoutOnce(t *testing.T) {
	url := pgtest.Start(t)
	st, err := store.OpenURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := newReplicaNode()
	var ids []string
	for i := range 5 {
		s := sandbox(fmt.Sprintf("sb-%d", i), apiv1.StateRunning)
		s.ExpiresAt = time.Now().Add(time.Duration(i) * 300 * time.Millisecond)
		if err := st.Put(sandboxBucket, s.ID, s); err != nil {
			t.Fatal(err)
		}
		n.alive[s.ID] = true
		ids = append(ids, s.ID)
	}
	a, b := newReplica(t, url, n, "a"), newReplica(t, url, n, "b")
	for _, id := range ids {
		if s := waitState(t, a.ControlPlane, id, apiv1.StateStopped); s.Reason != "timeout" {
			t.Fatalf("%s stopped: %q", id, s.Reason)
		}
	}
	time.Sleep(2 * time.Second) // the other replica's loop has run meanwhile too
	for _, id := range ids {
		if got := n.called("destroy " + id); got != 1 {
			t.Fatalf("%s destroyed %d times on timeout, want once", id, got)
		}
	}
	_ = b
}

// A create answered through a replica that dies mid-start reaches running
// through the other, which takes the start over once the dead one's
// liveness lease expires.
func TestReplicasTakeOverStart(t *testing.T) {
	url := pgtest.Start(t)
	n := newReplicaNode()
	n.hold = make(chan struct{})
	defer close(n.hold)
	a := newReplica(t, url, n, "a")
	waitUntil(t, "a leads", 5*time.Second, a.Leading)
	b := newReplica(t, url, n, "b")
	sb, err := a.Create(project.Everything, apiv1.CreateSandboxRequest{Template: "tpl"})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a's start reaches the node", 5*time.Second, func() bool { return n.called("create "+sb.ID) == 1 })
	if got, _ := b.Get(project.Everything, sb.ID); got.State != apiv1.StateStarting || got.Owner != "a" {
		t.Fatalf("b sees %s owned by %q, want starting owned by a", got.State, got.Owner)
	}
	a.kill()
	s := waitState(t, b.ControlPlane, sb.ID, apiv1.StateRunning)
	if s.Owner != "" {
		t.Fatalf("a running sandbox still has owner %q", s.Owner)
	}
	if got := n.called("create " + sb.ID); got != 2 {
		t.Fatalf("started %d times, want twice (a's, then b's)", got)
	}

	// A record left starting by a replica that never comes back, with no
	// liveness lease at all, is taken over too.
	s0 := sandbox("orphan", apiv1.StateStarting)
	s0.Owner = "gone"
	if err := b.st.Put(sandboxBucket, s0.ID, s0); err != nil {
		t.Fatal(err)
	}
	n.started.Store(s0.ID, true) // not held
	waitState(t, b.ControlPlane, s0.ID, apiv1.StateRunning)
}

// A burst of creates larger than the connections a replica may hold locks
// on all reach running: a start holds its sandbox's lock throughout, and
// nothing it does while holding it waits for another locking connection.
func TestReplicasCreateBurst(t *testing.T) {
	url := pgtest.Start(t) + "&pool_max_conns=4" // two locking connections
	n := newReplicaNode()
	a, b := newReplica(t, url, n, "a"), newReplica(t, url, n, "b")
	var ids []string
	for i := range 12 {
		cp := a.ControlPlane
		if i%2 == 1 {
			cp = b.ControlPlane
		}
		sb, err := cp.Create(project.Everything, apiv1.CreateSandboxRequest{Template: "tpl"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	for _, id := range ids {
		waitState(t, a.ControlPlane, id, apiv1.StateRunning)
	}
}

// A replica restarted under its name while another leads finishes the
// transitions its previous run left, which the leader, seeing it alive,
// does not touch.
func TestReplicasRestartFinishesOwn(t *testing.T) {
	url := pgtest.Start(t)
	n := newReplicaNode()
	b := newReplica(t, url, n, "b")
	waitUntil(t, "b leads", 5*time.Second, b.Leading)
	// a is alive (as its new run will be at once) from before the record
	// shows, so the leader never takes the record over.
	if ok, err := b.st.TryLead(context.Background(), "replica/a", "a", time.Minute); !ok || err != nil {
		t.Fatalf("liveness lease of a: %v, %v", ok, err)
	}
	s0 := sandbox("left", apiv1.StateStarting)
	s0.Owner = "a"
	if err := b.st.Put(sandboxBucket, s0.ID, s0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the leader's loop looks at it
	if got := n.called("create " + s0.ID); got != 0 {
		t.Fatalf("the leader started a record a live replica owns (%d starts)", got)
	}
	a := newReplica(t, url, n, "a")
	if a.Leading() {
		t.Fatal("the restarted replica leads while b does")
	}
	waitState(t, b.ControlPlane, s0.ID, apiv1.StateRunning)
	if got := n.called("create " + s0.ID); got != 1 {
		t.Fatalf("started %d times, want once", got)
	}
}

// Activity seen only by a replica that does not lead keeps the leader
// from suspending the sandbox as idle.
func TestReplicasShareActivity(t *testing.T) {
	url := pgtest.Start(t)
	n := newReplicaNode()
	a := newReplica(t, url, n, "a")
	waitUntil(t, "a leads", 5*time.Second, a.Leading)
	b := newReplica(t, url, n, "b")
	s0 := sandbox("busy", apiv1.StateRunning)
	s0.Lifecycle.IdleSuspendS = 2
	n.alive[s0.ID] = true
	if err := b.st.Put(sandboxBucket, s0.ID, s0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b caches the sandbox", 5*time.Second, func() bool { _, err := b.lookup(s0.ID); return err == nil })
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		b.touch(s0.ID)
		if got, _ := a.Get(project.Everything, s0.ID); got.State != apiv1.StateRunning {
			t.Fatalf("used through b, the sandbox went %s (%s)", got.State, got.Reason)
		}
	}
	// Left alone, it is suspended.
	if s := waitState(t, a.ControlPlane, s0.ID, apiv1.StateSuspended); s.Reason != "idle" {
		t.Fatalf("suspended for %q, want idle", s.Reason)
	}
}

// sweepNode is a replicaNode that remembers what each sweep kept.
type sweepNode struct {
	*replicaNode
	mu    sync.Mutex
	kepts [][]string
}

func (n *sweepNode) Sweep(_ context.Context, keep []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kepts = append(n.kepts, append([]string(nil), keep...))
	return nil
}

// A replica whose cache has not caught up with a sandbox another replica
// just created still keeps that sandbox when it reconciles the node (the
// node joined through it): the sweep works from the store's records.
func TestReplicasReconcileKeepsOthersSandboxes(t *testing.T) {
	url := pgtest.Start(t)
	n := &sweepNode{replicaNode: newReplicaNode()}
	st, err := store.OpenURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := func(st store.Store, name string) Config {
		return Config{
			Store: st, Nodes: OneNode("local", n), LocalNode: "local", Templates: fakeTemplates{}, ReplicaID: name, LeaseTTL: 1500 * time.Millisecond,
			Defaults: Defaults{VCPUs: 1, MemoryMB: 256, DiskMB: 64, TimeoutS: 3600, Retention: time.Hour},
		}
	}
	a := newReplica(t, url, n.replicaNode, "a")
	// b runs no loops: its cache learns of a's sandbox only if it reads
	// the store.
	b := New(cfg(st, "b"))
	if err := b.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb, err := a.Create(project.Everything, apiv1.CreateSandboxRequest{Template: "tpl"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, a.ControlPlane, sb.ID, apiv1.StateRunning)
	b.mu.Lock()
	_, cached := b.sandboxes[sb.ID]
	b.mu.Unlock()
	if cached {
		t.Fatal("b's cache already holds a's sandbox; the test needs it behind")
	}
	n.mu.Lock()
	n.kepts = nil
	n.mu.Unlock()
	if err := b.ReconcileNode(context.Background(), "local"); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.kepts) != 1 || len(n.kepts[0]) != 1 || n.kepts[0][0] != sb.ID {
		t.Fatalf("b's sweep kept %v, want [[%s]]: it would destroy a's sandbox", n.kepts, sb.ID)
	}
}

// The API's project check (Owner) on a replica that has not heard of a
// sandbox yet, as when the store's notification comes late, reads the
// store: a create answered by one replica is never a 404 on the other
// (TestClusterReplicas/replica-kill met one under a saturated CPU).
func TestReplicasOwnerBeforeTheNotification(t *testing.T) {
	_, a, b, sb := twoReplicasCreate(t)
	waitState(t, b.ControlPlane, sb.ID, apiv1.StateRunning) // no write follows
	b.mu.Lock()
	delete(b.sandboxes, sb.ID) // as if the notification had not come yet
	b.mu.Unlock()
	want, _ := a.Owner(sb.ID)
	if owner, ok := b.Owner(sb.ID); !ok || owner != want {
		t.Fatalf("Owner through the replica that has not heard of %s: %q, %v; want %q", sb.ID, owner, ok, want)
	}
	if _, ok := b.Owner("no-such-sandbox"); ok {
		t.Fatal("Owner of a sandbox no one created")
	}
}
