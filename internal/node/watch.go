package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// watchInterval is how often the node checks that its sandboxes' runtime
// processes are alive. A check is one kill(pid, 0) per sandbox.
const watchInterval = time.Second

// Run does the node's background work until ctx ends: it samples its
// sandboxes' resource use (metrics.go) and reports, as exit events,
// sandboxes whose runtime died on their own (killed by the host for
// exceeding their memory limit, or crashed). A sandbox the node stops
// itself is never reported.
func (n *Node) Run(ctx context.Context) {
	go n.sampleMetrics(ctx)
	n.watch(ctx, func(id, reason string) {
		n.publish(nodeapi.Event{Type: nodeapi.EventExit, Sandbox: id, Reason: reason})
	})
}

// watch calls died for every sandbox whose runtime died on its own.
func (n *Node) watch(ctx context.Context, died func(id, reason string)) {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, sb := range n.watched() {
			pid := sb.pid.Load()
			if pid <= 0 || syscall.Kill(int(pid), 0) != syscall.ESRCH {
				continue
			}
			if !sb.pid.CompareAndSwap(pid, 0) {
				continue // stopped on purpose meanwhile
			}
			reason := n.deathReason(sb.ID)
			n.log.Warn("sandbox runtime died", "sandbox", sb.ID, "reason", reason)
			died(sb.ID, reason)
		}
	}
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

// track records the pid of the sandbox's runtime process for Watch.
func (n *Node) track(ctx context.Context, sb *Sandbox) {
	if st, err := n.cfg.Runtime.State(ctx, sb.ID); err == nil && st.PID > 0 {
		sb.pid.Store(int64(st.PID))
	}
}

// untrack stops watching a sandbox the node is about to stop.
func (n *Node) untrack(id string) {
	if sb, err := n.lookup(id); err == nil {
		sb.pid.Store(0)
	}
}

// deathReason tells an out-of-memory kill from other deaths, from the
// sandbox's memory cgroup (v1: memory.oom_control, v2: memory.events).
func (n *Node) deathReason(id string) string {
	for _, f := range []string{"/sys/fs/cgroup/memory/space/" + id + "/memory.oom_control", "/sys/fs/cgroup/space/" + id + "/memory.events"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var count int
			if _, err := fmt.Sscanf(line, "oom_kill %d", &count); err == nil && count > 0 {
				return "killed for exceeding its memory limit"
			}
		}
	}
	return "its runtime exited unexpectedly"
}
