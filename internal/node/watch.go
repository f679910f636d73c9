package node

import (
	"context"
	"errors"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// Run does the node's background work until ctx ends: it samples its
// sandboxes' resource use (metrics.go). Sandboxes whose runtime dies on
// its own (killed by the host for exceeding their memory limit, or
// crashed) are reported as exit events as their runtime tells of it
// (track); a sandbox the node stops itself is never reported.
func (n *Node) Run(ctx context.Context) {
	n.sampleMetrics(ctx)
	// The sandboxes outlive the node process (a successor adopts them);
	// the waits for their end do not.
	for _, sb := range n.watched() {
		sb.stopWatch()
	}
}

// watching is one wait for a sandbox's runtime to end.
type watching struct{ cancel context.CancelFunc }

// watchAttempts is how often track begins a wait the runtime failed to
// begin (its state command killed or timed out on a loaded host) before
// it leaves the sandbox unwatched; watchRetryWait is the first pause
// between attempts, doubled after each.
const (
	watchAttempts  = 6
	watchRetryWait = 100 * time.Millisecond
)

// track waits, in the background, for the sandbox's runtime to end, and
// reports it as an exit event unless the node stopped the sandbox itself
// (untrack) meanwhile. A wait the runtime cannot begin is tried again a
// few times (an unwatched sandbox's death would go unreported); one the
// runtime refuses for want of the sandbox leaves it unwatched.
func (n *Node) track(ctx context.Context, sb *Sandbox) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watching{cancel: cancel}
	if old := sb.watch.Swap(w); old != nil {
		old.cancel()
	}
	go func() {
		defer cancel()
		var reason runtime.ExitReason
		var err error
		pause := watchRetryWait
		for attempt := 1; ; attempt++ {
			reason, err = n.rt(sb.ID).Wait(wctx, sb.ID)
			if err == nil || wctx.Err() != nil || errors.Is(err, runtime.ErrNotFound) || attempt == watchAttempts {
				break
			}
			n.log.Warn("cannot watch the sandbox's runtime; trying again", "sandbox", sb.ID, "attempt", attempt, "err", err)
			select {
			case <-wctx.Done():
			case <-time.After(pause):
			}
			pause *= 2
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				n.log.Warn("cannot watch the sandbox's runtime", "sandbox", sb.ID, "err", err)
			}
			sb.watch.CompareAndSwap(w, nil)
			return
		}
		if !sb.watch.CompareAndSwap(w, nil) {
			return // stopped on purpose meanwhile
		}
		msg := exitMessage(reason)
		n.log.Warn("sandbox runtime died", "sandbox", sb.ID, "reason", msg)
		n.publish(nodeapi.Event{Type: nodeapi.EventExit, Sandbox: sb.ID, Reason: msg})
	}()
}

// untrack stops watching a sandbox the node is about to stop.
func (n *Node) untrack(id string) {
	if sb, err := n.lookup(id); err == nil {
		sb.stopWatch()
	}
}

func (sb *Sandbox) stopWatch() {
	if w := sb.watch.Swap(nil); w != nil {
		w.cancel()
	}
}

// watched reports whether the node follows the sandbox's runtime: it runs,
// and the node is not stopping or suspending it.
func (sb *Sandbox) watched() bool { return sb.watch.Load() != nil }

// exitMessage is the exit event's reason for how the runtime ended.
func exitMessage(r runtime.ExitReason) string {
	if r == runtime.ExitOOM {
		return "killed for exceeding its memory limit"
	}
	return "its runtime exited unexpectedly"
}

func (n *Node) watched() []*Sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Sandbox, 0, len(n.sandboxes))
	for _, sb := range n.sandboxes {
		out = append(out, sb)
	}
	return out
}
