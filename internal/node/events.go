package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// Each subscriber of Events gets a buffer of eventBuffer events; an event
// that finds it full is dropped for that subscriber (and counted), so a
// slow consumer never holds up the node.
const eventBuffer = 1024

// activityEvery coalesces activity: at most one activity event per
// sandbox per interval. Idle suspend counts in seconds to hours, and a
// process printing in a loop must not flood the stream.
const activityEvery = time.Second

// events fans the node's events out to its subscribers.
type events struct {
	mu   sync.Mutex
	subs map[chan nodeapi.Event]struct{}
	// lastActivity is when each sandbox's last activity event went out.
	lastActivity map[string]time.Time
	dropped      atomic.Int64
}

// Events delivers the node's events from now on until ctx ends; the
// channel is closed then.
func (n *Node) Events(ctx context.Context) (<-chan nodeapi.Event, error) {
	ch := make(chan nodeapi.Event, eventBuffer)
	e := &n.events
	e.mu.Lock()
	if e.subs == nil {
		e.subs = map[chan nodeapi.Event]struct{}{}
	}
	e.subs[ch] = struct{}{}
	e.mu.Unlock()
	go func() {
		<-ctx.Done()
		e.mu.Lock()
		delete(e.subs, ch)
		// Under e.mu: publish never sends on a closed channel.
		close(ch)
		e.mu.Unlock()
	}()
	return ch, nil
}

// DroppedEvents counts the events a full subscriber buffer refused.
func (n *Node) DroppedEvents() int64 { return n.events.dropped.Load() }

// publish hands ev to every subscriber without waiting for any.
func (n *Node) publish(ev nodeapi.Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	e := &n.events
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case ch <- ev:
		default:
			if e.dropped.Add(1)%1000 == 1 {
				n.log.Warn("event subscriber too slow; events dropped", "dropped", e.dropped.Load())
			}
		}
	}
}

// activity reports that a sandbox's processes produced output, which
// counts as activity for idle suspend; at most once per activityEvery.
func (n *Node) activity(id string) {
	now := time.Now()
	e := &n.events
	e.mu.Lock()
	if len(e.subs) == 0 || now.Sub(e.lastActivity[id]) < activityEvery {
		e.mu.Unlock()
		return
	}
	if e.lastActivity == nil {
		e.lastActivity = map[string]time.Time{}
	}
	e.lastActivity[id] = now
	e.mu.Unlock()
	n.publish(nodeapi.Event{Type: nodeapi.EventActivity, Time: now.UTC(), Sandbox: id})
}

// forget drops what coalescing remembers of a sandbox that is gone.
func (e *events) forget(id string) {
	e.mu.Lock()
	delete(e.lastActivity, id)
	e.mu.Unlock()
}

// NetworkDenied reports that the gateway refused a sandbox's connection or
// name (message names what); the gateway bounds how often it says so.
func (n *Node) NetworkDenied(id, message string) {
	n.publish(nodeapi.Event{Type: nodeapi.EventNetworkDenied, Sandbox: id, Reason: message})
}

// poolChanged reports a template's pool stock.
func (n *Node) poolChanged(templateID string, st PoolStatus) {
	n.publish(nodeapi.Event{Type: nodeapi.EventPool, TemplateID: templateID, Pool: &st})
}
