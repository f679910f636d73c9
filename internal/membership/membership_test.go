package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

// controlPlane is a control plane in process: a real registry over a
// real store, which the test replaces to play a control-plane restart.
type controlPlane struct {
	mu    sync.Mutex
	reg   *cluster.Registry
	heard []cpapi.Template // the templates of the last call
}

func (c *controlPlane) registry() *cluster.Registry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg
}

func (c *controlPlane) restart(t *testing.T, st store.Store) *cluster.Registry {
	t.Helper()
	reg, err := cluster.New(cluster.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.reg = reg
	c.mu.Unlock()
	return reg
}

// service is the control plane's own side of the contract over the
// current registry.
func (c *controlPlane) service() *cpapi.Service {
	hear := func(_ string, ts []cpapi.Template) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.heard = ts
	}
	return &cpapi.Service{Registry: c.registry(), Heard: hear,
		Joined: func(n cluster.Node, ts []cpapi.Template) { hear(n.ID, ts) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func (c *controlPlane) Register(ctx context.Context, id, address string, info nodeapi.Info, templates []cpapi.Template) error {
	return c.service().Register(ctx, id, address, info, templates)
}

func (c *controlPlane) Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []cpapi.Template) error {
	return c.service().Heartbeat(ctx, id, info, templates)
}

func (c *controlPlane) templatesHeard() []cpapi.Template {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heard
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// info is a node whose sandbox count the test changes; it fails while
// broken is set.
type info struct {
	sandboxes atomic.Int64
	broken    atomic.Bool
	held      atomic.Int64 // how many templates it holds
}

// templates are the node's templates: held of them.
func (i *info) templates() []cpapi.Template {
	var out []cpapi.Template
	for n := range i.held.Load() {
		out = append(out, cpapi.Template{Name: fmt.Sprint("t", n), Spec: nodeapi.TemplateSpec{ID: fmt.Sprint(n)}})
	}
	return out
}

func (i *info) Info(context.Context) (nodeapi.Info, error) {
	if i.broken.Load() {
		return nodeapi.Info{}, errors.New("cannot read /proc")
	}
	return nodeapi.Info{VCPUs: 4, Sandboxes: int(i.sandboxes.Load())}, nil
}

// eventually waits for cond, failing the test after a few seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func start(t *testing.T, cp ControlPlane, node *info) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{ID: "n1", Address: "http://n1:7071", Node: node, ControlPlane: cp, Interval: 5 * time.Millisecond,
			Templates: node.templates, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context ended")
			return nil
		}
	}
}

func nodeState(reg *cluster.Registry, want cluster.State, sandboxes int) func() bool {
	return func() bool {
		n, err := reg.Get("n1")
		return err == nil && n.State == want && n.Info.Sandboxes == sandboxes
	}
}

func TestRegistersHeartbeatsAndRegistersAgain(t *testing.T) {
	st := openStore(t)
	cp := &controlPlane{}
	reg := cp.restart(t, st)
	node := &info{}
	stop := start(t, cp, node)

	eventually(t, "the node registered", nodeState(reg, cluster.Ready, 0))
	node.sandboxes.Store(3)
	eventually(t, "a heartbeat carried the node's new figures", nodeState(reg, cluster.Ready, 3))
	node.held.Store(2)
	eventually(t, "a heartbeat carried the node's templates", func() bool {
		ts := cp.templatesHeard()
		return len(ts) == 2 && ts[1].Name == "t1" && ts[1].Spec.ID == "1"
	})
	if _, err := reg.Cordon("n1"); err != nil {
		t.Fatal(err)
	}

	// A control plane restarted over the same store keeps the node, and
	// its cordon, as heartbeats go on.
	reg = cp.restart(t, st)
	node.sandboxes.Store(4)
	eventually(t, "heartbeats reached the restarted control plane", nodeState(reg, cluster.Cordoned, 4))

	// One whose store is new does not know the node: it registers again.
	reg = cp.restart(t, openStore(t))
	eventually(t, "the node registered with a control plane that forgot it", nodeState(reg, cluster.Ready, 4))

	// An operator's remove (of a node that looked empty) while it runs:
	// it joins again.
	node.sandboxes.Store(0)
	eventually(t, "the node reported no sandboxes", nodeState(reg, cluster.Ready, 0))
	if _, removed, err := reg.Remove("n1", false); err != nil || !removed {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	eventually(t, "the removed node registered again", nodeState(reg, cluster.Ready, 0))

	if err := stop(); err != nil {
		t.Fatalf("Run after its context ended: %v", err)
	}
}

func TestLostNodeStops(t *testing.T) {
	cp := &controlPlane{}
	reg := cp.restart(t, openStore(t))
	node := &info{}
	node.sandboxes.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{ID: "n1", Address: "http://n1:7071", Node: node, ControlPlane: cp, Interval: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	eventually(t, "the node registered", nodeState(reg, cluster.Ready, 2))
	if _, _, err := reg.Remove("n1", true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("Run of a lost node returned %v, want a conflict", err)
		}
	case <-ctx.Done():
		t.Fatal("Run kept heartbeating a node removed as lost")
	}
}

// A node whose Info fails sends nothing (the control plane sees silence)
// and registers once it can say what it has.
func TestNoRegistrationWithoutInfo(t *testing.T) {
	cp := &controlPlane{}
	reg := cp.restart(t, openStore(t))
	node := &info{}
	node.broken.Store(true)
	stop := start(t, cp, node)
	time.Sleep(50 * time.Millisecond)
	if _, err := reg.Get("n1"); !errors.Is(err, cluster.ErrUnknownNode) {
		t.Fatalf("a node that cannot read its info registered: %v", err)
	}
	node.broken.Store(false)
	eventually(t, "the node registered once its info read", nodeState(reg, cluster.Ready, 0))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// registrations counts the registrations a control plane took.
type registrations struct {
	*controlPlane
	n atomic.Int64
}

func (r *registrations) Register(ctx context.Context, id, address string, info nodeapi.Info, templates []cpapi.Template) error {
	r.n.Add(1)
	return r.controlPlane.Register(ctx, id, address, info, templates)
}

// A node registered already (one house's, by its control plane) only
// heartbeats: a registration would be a second join, which reconciles
// the node anew. It registers when the control plane forgets it. A
// heartbeat asked for (Now) goes at once.
func TestRegisteredNodeOnlyHeartbeats(t *testing.T) {
	cp := &registrations{controlPlane: &controlPlane{}}
	reg := cp.restart(t, openStore(t))
	if _, err := reg.Register("n1", "http://n1:7071", nodeapi.Info{}); err != nil {
		t.Fatal(err)
	}
	node := &info{}
	node.sandboxes.Store(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	now := make(chan struct{})
	go func() {
		// An interval no test waits out: heartbeats come when told.
		done <- Run(ctx, Config{ID: "n1", Address: "http://n1:7071", Node: node, ControlPlane: cp, Interval: time.Hour,
			Registered: true, Now: now, Templates: node.templates, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	eventually(t, "the first heartbeat carried the node's figures", nodeState(reg, cluster.Ready, 2))
	node.held.Store(1)
	now <- struct{}{}
	eventually(t, "a heartbeat asked for carried the node's new template", func() bool { return len(cp.templatesHeard()) == 1 })
	if n := cp.n.Load(); n != 0 {
		t.Fatalf("a registered node registered %d times", n)
	}
	reg = cp.restart(t, openStore(t))
	now <- struct{}{}
	eventually(t, "the node registered with a control plane that forgot it", nodeState(reg, cluster.Ready, 2))
	if n := cp.n.Load(); n == 0 {
		t.Fatal("no registration reached the control plane that forgot the node")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
