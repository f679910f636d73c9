package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

// memStore is an in-memory Store: JSON records by bucket and key, as the
// real stores keep them.
type memStore struct {
	mu      sync.Mutex
	buckets map[string]map[string][]byte
}

func newMemStore() *memStore { return &memStore{buckets: map[string]map[string][]byte{}} }

func (s *memStore) Put(bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = map[string][]byte{}
	}
	s.buckets[bucket][key] = data
	return nil
}

func (s *memStore) Get(bucket, key string, v any) error {
	s.mu.Lock()
	data, ok := s.buckets[bucket][key]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s/%s: %w", bucket, key, store.ErrNotFound)
	}
	return json.Unmarshal(data, v)
}

func (s *memStore) Delete(bucket, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.buckets[bucket], key)
	return nil
}

func (s *memStore) Each(bucket string, fn func(key string, data []byte) error) error {
	s.mu.Lock()
	b := map[string][]byte{}
	for k, v := range s.buckets[bucket] {
		b[k] = v
	}
	s.mu.Unlock()
	for k, v := range b {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// clock is a fake clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type countingDrainer struct{ started []string }

func (d *countingDrainer) StartDrain(id string) error {
	d.started = append(d.started, id)
	return nil
}

func newTestRegistry(t *testing.T, st Store, c *clock, mod func(*Config)) *Registry {
	t.Helper()
	cfg := Config{Store: st, Now: c.Now}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)} }

func mustRegister(t *testing.T, r *Registry, id string, info nodeapi.Info) Node {
	t.Helper()
	n, err := r.Register(id, "http://"+id+".example:7071", info)
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return n
}

func mustState(t *testing.T, r *Registry, id string, want State) Node {
	t.Helper()
	n, err := r.Get(id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if n.State != want {
		t.Fatalf("node %s is %s (%s), want %s", id, n.State, n.Reason, want)
	}
	return n
}

func TestRegisterAndList(t *testing.T) {
	c := newClock()
	r := newTestRegistry(t, newMemStore(), c, nil)
	n := mustRegister(t, r, "node-b", nodeapi.Info{VCPUs: 4, MemoryMB: 8192, Sandboxes: 3})
	if n.State != Ready || n.Info.ID != "node-b" || n.Info.VCPUs != 4 || !n.RegisteredAt.Equal(c.Now()) || !n.LastHeartbeat.Equal(c.Now()) {
		t.Fatalf("registered node = %+v", n)
	}
	mustRegister(t, r, "node-a", nodeapi.Info{VCPUs: 2})
	list, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "node-a" || list[1].ID != "node-b" || list[1].Address != "http://node-b.example:7071" {
		t.Fatalf("list = %+v", list)
	}
	if _, err := r.Get("node-c"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("get of an unknown node: %v", err)
	}
}

func TestRegisterRefusesMalformedIDsAndAddresses(t *testing.T) {
	r := newTestRegistry(t, newMemStore(), newClock(), nil)
	for _, id := range []string{"", "Node", "a_b", "-a", "a-", "a/b", "../x", strings.Repeat("a", 64)} {
		if _, err := r.Register(id, "http://x:1", nodeapi.Info{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("id %q: %v, want ErrInvalid", id, err)
		}
	}
	// A node may name itself in-process, never another node.
	for _, addr := range []string{"", "x:1", "ftp://x", "http://", "http://u:p@x:1", "://x", "inproc://n2", "inproc://", "inproc://n1/x"} {
		if _, err := r.Register("n1", addr, nodeapi.Info{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("address %q: %v, want ErrInvalid", addr, err)
		}
	}
	for _, addr := range []string{"https://10.0.0.1:7071", InProcessAddress("n1")} {
		if _, err := r.Register("n1", addr, nodeapi.Info{}); err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
	}
}

// A control plane that restarts finds its nodes in the store; a node that
// registers again keeps what an operator set.
func TestReRegisterKeepsCordon(t *testing.T) {
	c, st := newClock(), newMemStore()
	r := newTestRegistry(t, st, c, nil)
	first := mustRegister(t, r, "n1", nodeapi.Info{})
	if _, err := r.Cordon("n1"); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Minute)

	restarted := newTestRegistry(t, st, c, nil)
	mustState(t, restarted, "n1", Unreachable)
	n, err := restarted.Register("n1", "http://moved.example:7071", nodeapi.Info{Sandboxes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n.State != Cordoned || n.Address != "http://moved.example:7071" || !n.RegisteredAt.Equal(first.RegisteredAt) || n.Info.Sandboxes != 1 {
		t.Fatalf("re-registered node = %+v", n)
	}
}

func TestUnreachableAfterMissedHeartbeats(t *testing.T) {
	c := newClock()
	r := newTestRegistry(t, newMemStore(), c, nil)
	mustRegister(t, r, "n1", nodeapi.Info{})
	c.advance(DefaultHeartbeatTimeout)
	mustState(t, r, "n1", Ready) // at the bound, not past it
	c.advance(time.Second)
	n := mustState(t, r, "n1", Unreachable)
	if n.Reason != "no heartbeat for 16s" {
		t.Fatalf("reason = %q", n.Reason)
	}
	if err := r.Heartbeat("n1", nodeapi.Info{Sandboxes: 2}); err != nil {
		t.Fatal(err)
	}
	n = mustState(t, r, "n1", Ready)
	if n.Reason != "" || n.Info.Sandboxes != 2 || !n.LastHeartbeat.Equal(c.Now()) {
		t.Fatalf("after heartbeat: %+v", n)
	}

	// A cordoned node that goes silent reads unreachable, and cordoned
	// again when it is back.
	if _, err := r.Cordon("n1"); err != nil {
		t.Fatal(err)
	}
	c.advance(20 * time.Second)
	if n := mustState(t, r, "n1", Unreachable); !strings.Contains(n.Reason, "(cordoned)") {
		t.Fatalf("reason = %q, want the cordon named", n.Reason)
	}
	if err := r.Heartbeat("n1", nodeapi.Info{}); err != nil {
		t.Fatal(err)
	}
	mustState(t, r, "n1", Cordoned)
}

func TestHeartbeatTimeoutIsConfigurable(t *testing.T) {
	c := newClock()
	r := newTestRegistry(t, newMemStore(), c, func(cfg *Config) { cfg.HeartbeatTimeout = 3 * time.Second })
	mustRegister(t, r, "n1", nodeapi.Info{})
	c.advance(4 * time.Second)
	mustState(t, r, "n1", Unreachable)
}

func TestHeartbeatOfUnknownNode(t *testing.T) {
	r := newTestRegistry(t, newMemStore(), newClock(), nil)
	if err := r.Heartbeat("n1", nodeapi.Info{}); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("heartbeat of an unregistered node: %v, want ErrUnknownNode", err)
	}
}

func TestTransitions(t *testing.T) {
	c := newClock()
	d := &countingDrainer{}
	r := newTestRegistry(t, newMemStore(), c, func(cfg *Config) { cfg.Drainer = d })
	mustRegister(t, r, "n1", nodeapi.Info{})

	steps := []struct {
		op   string
		want State
		err  error
	}{
		{"cordon", Cordoned, nil},
		{"cordon", Cordoned, nil},
		{"uncordon", Ready, nil},
		{"uncordon", Ready, nil},
		{"drain", Draining, nil},
		{"drain", Draining, nil},
		{"cordon", Draining, ErrConflict},
		{"uncordon", Ready, nil},
		{"cordon", Cordoned, nil},
		{"drain", Draining, nil},
	}
	ops := map[string]func(string) (Node, error){"cordon": r.Cordon, "uncordon": r.Uncordon, "drain": r.Drain}
	for i, s := range steps {
		_, err := ops[s.op]("n1")
		if !errors.Is(err, s.err) {
			t.Fatalf("step %d %s: err %v, want %v", i, s.op, err, s.err)
		}
		mustState(t, r, "n1", s.want)
	}
	if strings.Join(d.started, ",") != "n1,n1" {
		t.Fatalf("drains started: %q, want one per drain from a non-draining state", d.started)
	}
	for op, fn := range ops {
		if _, err := fn("nope"); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("%s of an unknown node: %v", op, err)
		}
	}
}

func TestRemove(t *testing.T) {
	c := newClock()
	r := newTestRegistry(t, newMemStore(), c, nil)
	mustRegister(t, r, "idle", nodeapi.Info{})
	mustRegister(t, r, "busy", nodeapi.Info{Sandboxes: 3})

	if _, removed, err := r.Remove("idle", false); err != nil || !removed {
		t.Fatalf("remove of a node without sandboxes: removed %v, %v", removed, err)
	}
	if _, err := r.Get("idle"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("removed node still there: %v", err)
	}

	if _, _, err := r.Remove("busy", false); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "3 sandboxes") {
		t.Fatalf("remove of a node with sandboxes without force: %v, want a conflict naming them", err)
	}
	mustState(t, r, "busy", Ready)

	c.advance(time.Minute)
	n, removed, err := r.Remove("busy", true)
	if err != nil || removed || n.State != Lost || !strings.Contains(n.Reason, "unreachable with 3 sandboxes") {
		t.Fatalf("forced remove: %+v removed %v, %v", n, removed, err)
	}
	mustState(t, r, "busy", Lost) // lost, not unreachable, however long silent
	if err := r.Heartbeat("busy", nodeapi.Info{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("heartbeat of a lost node: %v", err)
	}
	if _, err := r.Register("busy", "http://busy:1", nodeapi.Info{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("register of a lost node: %v", err)
	}
	for op, fn := range map[string]func(string) (Node, error){"cordon": r.Cordon, "uncordon": r.Uncordon, "drain": r.Drain} {
		if _, err := fn("busy"); !errors.Is(err, ErrConflict) {
			t.Errorf("%s of a lost node: %v", op, err)
		}
	}

	if _, removed, err := r.Remove("busy", false); err != nil || !removed {
		t.Fatalf("remove of a lost node: removed %v, %v", removed, err)
	}
	mustRegister(t, r, "busy", nodeapi.Info{})
	mustState(t, r, "busy", Ready)
	if _, _, err := r.Remove("nope", true); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("remove of an unknown node: %v", err)
	}
}

// A drain's report lands in the reason of a node that still drains only.
func TestNoteDrain(t *testing.T) {
	r := newTestRegistry(t, newMemStore(), newClock(), nil)
	mustRegister(t, r, "n1", nodeapi.Info{})
	if err := r.NoteDrain("n1", "drained"); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Get("n1"); n.Reason != "" {
		t.Fatalf("a ready node took a drain's reason: %q", n.Reason)
	}
	if _, err := r.Drain("n1"); err != nil {
		t.Fatal(err)
	}
	if err := r.NoteDrain("n1", "drained: every sandbox moved"); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Get("n1"); n.State != Draining || n.Reason != "drained: every sandbox moved" {
		t.Fatalf("node after the report: %s (%q)", n.State, n.Reason)
	}
	if err := r.NoteDrain("nope", "x"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("report on an unknown node: %v", err)
	}
}

// countingStore counts the reads that reach the store.
type countingStore struct {
	*memStore
	mu    sync.Mutex
	reads int
}

func (s *countingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *countingStore) Get(bucket, key string, v any) error {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.memStore.Get(bucket, key, v)
}

func (s *countingStore) Each(bucket string, fn func(key string, data []byte) error) error {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.memStore.Each(bucket, fn)
}

// With ReadCacheTTL, List and Get answer from one read of the store until
// this registry writes: its own heartbeats show at once, its own cordon
// drops the copy, another replica's change waits for the copy to age, and
// a node the copy does not know is looked up in the store.
func TestReadCache(t *testing.T) {
	st := &countingStore{memStore: newMemStore()}
	c := newClock()
	a := newTestRegistry(t, st, c, func(cfg *Config) { cfg.ReadCacheTTL = time.Hour })
	b := newTestRegistry(t, st, c, nil)
	mustRegister(t, a, "n1", nodeapi.Info{VCPUs: 4, MemoryMB: 8192})
	if _, err := a.List(); err != nil {
		t.Fatal(err)
	}
	reads := st.count()
	for range 3 {
		if ns, err := a.List(); err != nil || len(ns) != 1 {
			t.Fatalf("list: %v, %v", ns, err)
		}
		if _, err := a.Get("n1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.count(); got != reads {
		t.Fatalf("%d store reads for cached lists and gets; want none", got-reads)
	}

	if err := a.Heartbeat("n1", nodeapi.Info{VCPUs: 4, MemoryMB: 8192, Sandboxes: 5}); err != nil {
		t.Fatal(err)
	}
	reads = st.count()
	if n, err := a.Get("n1"); err != nil || n.Info.Sandboxes != 5 {
		t.Fatalf("after its own heartbeat: %+v, %v; want 5 sandboxes", n, err)
	}
	if st.count() != reads {
		t.Fatal("its own heartbeat dropped the cached read")
	}

	if _, err := b.Cordon("n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Get("n1"); n.State != Ready {
		t.Fatalf("another replica's cordon seen in %s before the copy aged; the test assumes the cache", n.State)
	}
	if _, err := a.Uncordon("n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Cordon("n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Get("n1"); n.State != Cordoned {
		t.Fatalf("after its own cordon: %s; want cordoned", n.State)
	}

	mustRegister(t, b, "n2", nodeapi.Info{VCPUs: 2, MemoryMB: 4096})
	if n, err := a.Get("n2"); err != nil || n.ID != "n2" {
		t.Fatalf("a node joined through another replica: %+v, %v", n, err)
	}

	// Without the cache, another replica's change is seen at once.
	plain := newTestRegistry(t, st, c, nil)
	if _, err := b.Uncordon("n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := plain.Get("n1"); n.State != Ready {
		t.Fatalf("uncached: %s; want ready", n.State)
	}
}

// A node whose sandboxes have no other ready node to go to is not drained:
// the refusal says why and leaves it ready; once another node is ready the
// drain starts.
func TestDrainNeedsATarget(t *testing.T) {
	d := &countingDrainer{}
	r := newTestRegistry(t, newMemStore(), newClock(), func(cfg *Config) { cfg.Drainer = d })
	mustRegister(t, r, "n1", nodeapi.Info{Sandboxes: 2})
	_, err := r.Drain("n1")
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "no other node is ready") {
		t.Fatalf("drain of the only node: %v, want ErrConflict saying there is no target", err)
	}
	if n, _ := r.Get("n1"); n.State != Ready || len(d.started) != 0 {
		t.Fatalf("a refused drain changed the node: %s, drains started %v", n.State, d.started)
	}
	mustRegister(t, r, "n2", nodeapi.Info{})
	if _, err := r.Cordon("n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Drain("n1"); !errors.Is(err, ErrConflict) {
		t.Fatalf("drain with the other node cordoned: %v, want ErrConflict", err)
	}
	if _, err := r.Uncordon("n2"); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Drain("n1"); err != nil || n.State != Draining || len(d.started) != 1 {
		t.Fatalf("drain with a ready target: %+v, %v, started %v", n, err, d.started)
	}
}
