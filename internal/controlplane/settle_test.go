package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// slowSuspendNode holds Suspend until the test lets it go on, and hands
// out data planes of running sandboxes.
type slowSuspendNode struct {
	*fakeNode
	entered, proceed chan struct{}
}

func (n *slowSuspendNode) Suspend(ctx context.Context, id, image string) error {
	n.entered <- struct{}{}
	<-n.proceed
	return n.fakeNode.Suspend(ctx, id, image)
}

func (n *slowSuspendNode) Sandbox(_ context.Context, id string) (nodeapi.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.alive[id] {
		return nil, nodeapi.ErrNoSandbox
	}
	return stubSandbox{id: id}, nil
}

// stubSandbox is a data plane with an id and nothing else.
type stubSandbox struct {
	nodeapi.Sandbox
	id string
}

func (s stubSandbox) ID() string { return s.id }

// suspendingCP is a control plane whose sandbox "a" (auto-resume as
// given) is being suspended: the suspend has reached the node and waits
// there for proceed.
func suspendingCP(t *testing.T, autoResume bool) (*ControlPlane, *slowSuspendNode, <-chan error) {
	t.Helper()
	n := &slowSuspendNode{fakeNode: newFakeNode(), entered: make(chan struct{}), proceed: make(chan struct{})}
	n.alive["a"], n.volumes["sandboxes/a"] = true, true
	s := sandbox("a", apiv1.StateRunning)
	s.Lifecycle.AutoResume = autoResume
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", n)}, t.TempDir(), n.fakeNode, s)
	suspended := make(chan error, 1)
	go func() {
		_, err := cp.Suspend(context.Background(), "a")
		suspended <- err
	}()
	<-n.entered
	if got, _ := cp.Get(project.Everything, "a"); got.State != apiv1.StateSuspending {
		t.Fatalf("state during the suspend: %s", got.State)
	}
	return cp, n, suspended
}

// Traffic that reaches an auto-resumable sandbox while it is being
// suspended waits for the suspend to end and then resumes it, as it would
// had it arrived a moment later.
func TestRunningWaitsForSuspendThenResumes(t *testing.T) {
	cp, n, suspended := suspendingCP(t, true)
	got := make(chan error, 1)
	go func() {
		sb, err := cp.Running(context.Background(), "a")
		if err == nil && sb.ID() != "a" {
			err = errors.New("data plane of " + sb.ID())
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Running answered during the suspend: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(n.proceed)
	if err := <-suspended; err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Running after the suspend: %v", err)
	}
	if s, _ := cp.Get(project.Everything, "a"); s.State != apiv1.StateRunning {
		t.Fatalf("state after the traffic: %s, want running", s.State)
	}
	if n.called("suspend a") != 1 || n.called("resumefrom a") != 1 {
		t.Fatalf("node calls: %v", n.calls)
	}
}

// Without auto-resume the traffic is refused at once, and the suspend
// goes on undisturbed.
func TestRunningDuringSuspendWithoutAutoResume(t *testing.T) {
	cp, n, suspended := suspendingCP(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cp.Running(ctx, "a")
	var stateErr *StateError
	if !errors.As(err, &stateErr) || stateErr.State != apiv1.StateSuspending {
		t.Fatalf("Running during a suspend without auto-resume: %v, want a StateError (suspending)", err)
	}
	close(n.proceed)
	if err := <-suspended; err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if s, _ := cp.Get(project.Everything, "a"); s.State != apiv1.StateSuspended || n.called("resumefrom") != 0 {
		t.Fatalf("state %s, calls %v: want suspended, never resumed", s.State, n.calls)
	}
}

// A waiting request gives up when its client does.
func TestRunningDuringSuspendHonoursContext(t *testing.T) {
	cp, n, suspended := suspendingCP(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := cp.Running(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Running with a client that gave up: %v", err)
	}
	close(n.proceed)
	if err := <-suspended; err != nil {
		t.Fatalf("suspend: %v", err)
	}
}

// slowCaptureNode holds Capture (a snapshot's) until the test lets it go on.
type slowCaptureNode struct {
	*slowSuspendNode
}

func (n slowCaptureNode) Capture(ctx context.Context, req nodeapi.CaptureRequest) error {
	n.entered <- struct{}{}
	<-n.proceed
	return n.fakeNode.Capture(ctx, req)
}

// Traffic that reaches a sandbox while a snapshot of it is taken (a
// rolling one, which the caller did not ask for) waits for the snapshot
// and is served, instead of being refused for a state it cannot see.
func TestRunningWaitsForASnapshot(t *testing.T) {
	n := slowCaptureNode{&slowSuspendNode{fakeNode: newFakeNode(), entered: make(chan struct{}), proceed: make(chan struct{})}}
	n.alive["a"], n.volumes["sandboxes/a"] = true, true
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", n)}, t.TempDir(), n.fakeNode, sandbox("a", apiv1.StateRunning))
	taken := make(chan error, 1)
	go func() {
		_, err := cp.CreateSnapshot(context.Background(), "a", "s1")
		taken <- err
	}()
	<-n.entered
	got := make(chan error, 1)
	go func() {
		_, err := cp.Running(context.Background(), "a")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Running answered during the snapshot: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(n.proceed)
	if err := <-taken; err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Running after the snapshot: %v", err)
	}
}
