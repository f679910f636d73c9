package controlplane

import (
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Event is one recorded thing that happened to a sandbox.
type Event = apiv1.SandboxEvent

// maxEvents bounds the events kept per sandbox; older ones are dropped.
const maxEvents = 500

// recordEvent appends an event to the sandbox's durable history.
func (cp *ControlPlane) recordEvent(id string, ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	// Its own lock: the read-modify-write of the history is disk I/O and
	// must not hold up every other request behind cp.mu. Across replicas
	// the sandbox's lock, which nearly every caller holds, serialises
	// appends; a store lock here would need a second locking connection
	// per operation, and a burst of starts could then take them all and
	// wait on each other.
	cp.eventsMu.Lock()
	defer cp.eventsMu.Unlock()
	var events []Event
	_ = cp.cfg.Store.Get(eventBucket, id, &events)
	events = append(events, ev)
	if len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	if err := cp.cfg.Store.Put(eventBucket, id, events); err != nil {
		cp.log.Error("record event", "sandbox", id, "err", err)
	}
}

// Events returns the sandbox's recorded events, oldest first.
func (cp *ControlPlane) Events(id string) ([]Event, error) {
	if _, err := cp.lookup(id); err != nil {
		return nil, err
	}
	var events []Event
	if err := cp.cfg.Store.Get(eventBucket, id, &events); err != nil {
		return []Event{}, nil
	}
	return events, nil
}
