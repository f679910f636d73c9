package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// The control plane follows the node's events: activity counts for idle
// suspend, an exit fails the sandbox with its reason, and a stream that
// closes is subscribed to again.
func TestNodeEventsAreFollowed(t *testing.T) {
	fn := newFakeNode()
	fn.alive["a"], fn.alive["b"] = true, true
	cp := newTestCP(t, fn, sandbox("a", apiv1.StateRunning), sandbox("b", apiv1.StateRunning))
	streams := make(chan chan nodeapi.Event, 2)
	fn.subscribe = func(context.Context) (<-chan nodeapi.Event, error) {
		ch := make(chan nodeapi.Event, 4)
		streams <- ch
		return ch, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cp.followNode(ctx, "local")

	first := <-streams
	cp.mu.Lock()
	idleSince := time.Now().Add(-time.Hour)
	cp.lastActive["a"] = idleSince
	cp.mu.Unlock()
	first <- nodeapi.Event{Type: nodeapi.EventActivity, Sandbox: "a"}
	close(first) // the stream breaks

	second := <-streams
	second <- nodeapi.Event{Type: nodeapi.EventExit, Sandbox: "b", Reason: "killed for exceeding its memory limit"}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	got, err := cp.Wait(wctx, "b", apiv1.StateFailed)
	if err != nil && got.State != apiv1.StateFailed {
		t.Fatalf("after an exit event: %s, %v; want failed", got.State, err)
	}
	if !strings.Contains(got.Reason, "memory limit") {
		t.Fatalf("failed for %q; want the exit's reason", got.Reason)
	}
	cp.mu.Lock()
	last := cp.lastActive["a"]
	cp.mu.Unlock()
	if !last.After(idleSince) {
		t.Fatal("an activity event did not count as activity")
	}
	if s := mustGet(t, cp, "a"); s.State != apiv1.StateRunning {
		t.Fatalf("a is %s; only b exited", s.State)
	}
}
