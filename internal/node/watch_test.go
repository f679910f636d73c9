package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// endingRuntime is a runtime whose sandboxes end when the test says, with
// the reason it sends; Wait is all the node's watch asks of it.
type endingRuntime struct {
	runtime.Runtime
	ends map[string]chan runtime.ExitReason
}

func (r endingRuntime) Wait(ctx context.Context, id string) (runtime.ExitReason, error) {
	select {
	case reason := <-r.ends[id]:
		return reason, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// The end the runtime reports of a sandbox the node runs is an exit
// event, its reason told apart by the runtime; an end the node caused
// (untrack first, as a destroy or suspend does) is not reported, and a
// sandbox no longer watched is not sampled either.
func TestRuntimeEndsAreExitEvents(t *testing.T) {
	ids := []string{"oom", "crash", "stopped"}
	rt := endingRuntime{ends: map[string]chan runtime.ExitReason{}}
	for _, id := range ids {
		rt.ends[id] = make(chan runtime.ExitReason, 1)
	}
	n := testNode(t)
	n.cfg.Runtimes = map[string]runtime.Runtime{runtime.GVisor: rt}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, _ := n.Events(ctx)
	for _, id := range ids {
		sb := &Sandbox{ID: id, node: n}
		n.register(sb)
		n.track(ctx, sb)
		if !sb.watched() {
			t.Fatalf("%s is not watched after track", id)
		}
	}
	n.untrack("stopped")
	rt.ends["stopped"] <- runtime.ExitDied
	rt.ends["oom"] <- runtime.ExitOOM
	rt.ends["crash"] <- runtime.ExitDied

	want := map[string]string{"oom": "killed for exceeding its memory limit", "crash": "its runtime exited unexpectedly"}
	for len(want) > 0 {
		select {
		case ev := <-events:
			if ev.Type != nodeapi.EventExit || want[ev.Sandbox] != ev.Reason {
				t.Fatalf("event %+v; want exits %v", ev, want)
			}
			delete(want, ev.Sandbox)
		case <-time.After(5 * time.Second):
			t.Fatalf("no exit event for %v", want)
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("event %+v for a sandbox the node stopped itself", ev)
	case <-time.After(100 * time.Millisecond):
	}
	for _, sb := range n.watched() {
		if sb.watched() {
			t.Errorf("%s is still watched after its end", sb.ID)
		}
	}
}

// failingRuntime fails the first fails waits it is asked to begin, as a
// runsc state killed under load does, then reports the sandbox dead; a
// sandbox it does not know it refuses with ErrNotFound.
type failingRuntime struct {
	runtime.Runtime
	fails atomic.Int32
	waits atomic.Int32
}

func (r *failingRuntime) Wait(ctx context.Context, id string) (runtime.ExitReason, error) {
	r.waits.Add(1)
	if id == "unknown" {
		return "", fmt.Errorf("%s: %w", id, runtime.ErrNotFound)
	}
	if r.fails.Add(-1) >= 0 {
		return "", errors.New("runsc state: signal: killed")
	}
	return runtime.ExitDied, nil
}

// A wait the runtime failed to begin is begun again: the sandbox's death
// is still reported. One the runtime refuses for want of the sandbox is
// not tried again.
func TestWatchOutlastsAFailedWait(t *testing.T) {
	rt := &failingRuntime{}
	rt.fails.Store(2)
	n := testNode(t)
	n.cfg.Runtimes = map[string]runtime.Runtime{runtime.GVisor: rt}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, _ := n.Events(ctx)
	sb := &Sandbox{ID: "s1", node: n}
	n.register(sb)
	n.track(ctx, sb)
	select {
	case ev := <-events:
		if ev.Type != nodeapi.EventExit || ev.Sandbox != "s1" {
			t.Fatalf("event %+v, want the exit of s1", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit event after two failed waits")
	}
	if got := rt.waits.Load(); got != 3 {
		t.Fatalf("%d waits begun, want 3", got)
	}

	rt.waits.Store(0)
	unknown := &Sandbox{ID: "unknown", node: n}
	n.register(unknown)
	n.track(ctx, unknown)
	deadline := time.Now().Add(5 * time.Second)
	for unknown.watched() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if unknown.watched() || rt.waits.Load() != 1 {
		t.Fatalf("a sandbox the runtime does not know: watched %v after %d waits", unknown.watched(), rt.waits.Load())
	}
}
