package node

import (
	"context"
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
