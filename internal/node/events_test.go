package node

import (
	"context"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// Every subscriber gets every event; activity is coalesced per sandbox.
func TestEventsFanOutAndCoalesceActivity(t *testing.T) {
	n := testNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _ := n.Events(ctx)
	b, _ := n.Events(ctx)
	for i := 0; i < 100; i++ {
		n.activity("s1")
		n.activity("s2")
	}
	n.publish(nodeapi.Event{Type: nodeapi.EventExit, Sandbox: "s1", Reason: "killed for exceeding its memory limit"})
	for _, ch := range []<-chan nodeapi.Event{a, b} {
		var got []nodeapi.Event
		for len(got) < 3 {
			select {
			case ev := <-ch:
				got = append(got, ev)
			case <-time.After(5 * time.Second):
				t.Fatalf("got %v, want 3 events", got)
			}
		}
		if got[0].Type != nodeapi.EventActivity || got[1].Type != nodeapi.EventActivity || got[0].Sandbox == got[1].Sandbox {
			t.Fatalf("first events %v; want one activity for each sandbox", got[:2])
		}
		if got[2].Type != nodeapi.EventExit || got[2].Reason == "" || got[2].Time.IsZero() {
			t.Fatalf("third event %+v; want the exit with its reason and time", got[2])
		}
		select {
		case ev := <-ch:
			t.Fatalf("extra event %+v: activity was not coalesced", ev)
		default:
		}
	}
}

// A subscriber that does not read never holds up the node: what its
// buffer cannot take is dropped and counted. Its channel closes with ctx.
func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	n := testNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, _ := n.Events(ctx)
	done := make(chan struct{})
	go func() {
		for i := 0; i < eventBuffer+10; i++ {
			n.poolChanged("tpl", PoolStatus{Size: 1, Ready: i % 2})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publishing blocked on a subscriber that does not read")
	}
	if got := n.DroppedEvents(); got != 10 {
		t.Fatalf("dropped %d events, want 10", got)
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the channel was not closed after ctx ended")
		}
	}
}
