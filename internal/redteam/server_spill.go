package redteam

import (
	"context"
	"fmt"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// The spill attack's sandbox and sessions: several sessions, each
// writing as much as the whole sandbox's disk, none of them read.
const (
	spillDiskMB   = 512
	spillSessions = 4
	// memoryTail is what a session's journal keeps in memory besides its
	// spill (the node's session output limit, 8 MiB by default): not on
	// disk, so not charged to disk_mb.
	memoryTail = 8 << 20
	// plateauPolls is how many polls without new output mean the
	// processes are held back.
	plateauPolls = 5
)

func spillAttack() ServerAttack {
	return ServerAttack{
		Name: "session output spill past disk_mb", Timeout: 3 * time.Minute,
		Checks: []Check{{Name: "session output spill past disk_mb",
			Expected: fmt.Sprintf("the server holds at most disk_mb (%d MiB, plus %d MiB in memory per session) of a sandbox's unread output", spillDiskMB, memoryTail>>20),
			Escape:   "a sandbox writing past its disk_mb onto the server's own disk"}},
		Run: func(ctx context.Context, t *tenant) []Verdict { return []Verdict{t.spill(ctx)} },
	}
}

// spill starts spillSessions sessions that each write disk_mb of output
// nobody reads, and samples what the server holds of it (the sessions'
// output_bytes less dropped_bytes). It stops them the moment that passes
// the bound, so a broken server holds little more than the bound.
func (t *tenant) spill(ctx context.Context) Verdict {
	sb, err := t.newSandbox(ctx, spillDiskMB)
	if err != nil {
		return failed("create a sandbox with disk_mb %d: %v", spillDiskMB, err)
	}
	script := fmt.Sprintf("dd if=/dev/zero bs=1048576 count=%d 2>/dev/null", spillDiskMB)
	var ids []string
	for range spillSessions {
		sess, err := t.api.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", script}})
		if err != nil {
			return failed("start an output session: %v", err)
		}
		ids = append(ids, sess.ID)
	}
	bound := int64(spillDiskMB)<<20 + spillSessions*memoryTail
	began := time.Now()
	var lastWritten, lastKept int64
	still := 0
	for {
		var written, kept, dropped int64
		running := 0
		for _, id := range ids {
			sess, err := t.api.GetSession(ctx, sb.ID, id)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return failed("read session %s: %v", id, err)
			}
			written += sess.OutputBytes
			dropped += sess.DroppedBytes
			kept += sess.OutputBytes - sess.DroppedBytes
			if sess.State == apiv1.SessionRunning {
				running++
			}
		}
		elapsed := time.Since(began).Round(time.Second)
		switch {
		case ctx.Err() != nil:
			if lastWritten > bound && lastKept <= bound {
				return held("in %s %d sessions wrote %s; the server dropped the oldest, holding %s, within %s", elapsed, spillSessions, mib(lastWritten), mib(lastKept), mib(bound))
			}
			return skipped("inconclusive: in %s the sessions wrote %s, less than the bound %s, and were not held back", elapsed, mib(lastWritten), mib(bound))
		case kept > bound:
			t.stopSessions(sb.ID, ids)
			return broke("%d unread sessions of a sandbox with disk_mb %d: the server holds %s of their output (%s written, %s dropped) after %s, past %s",
				spillSessions, spillDiskMB, mib(kept), mib(written), mib(dropped), elapsed, mib(bound))
		case running == 0:
			return held("the %d sessions ended having written %s; the server holds %s of it (%s dropped), within %s",
				spillSessions, mib(written), mib(kept), mib(dropped), mib(bound))
		case written == lastWritten && written > 0:
			still++
			if still >= plateauPolls {
				return held("the output stopped at %s with the sessions running: the server holds %s and holds the processes back", mib(written), mib(kept))
			}
		default:
			still = 0
		}
		lastWritten, lastKept = written, kept
		_ = sleepCtx(ctx, t.cfg.poll) // an ended ctx is judged above
	}
}

// stopSessions kills the flood's processes, with a context of its own:
// the attack's may have ended.
func (t *tenant) stopSessions(sandbox string, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		_ = t.api.Signal(ctx, sandbox, id, "KILL")
	}
}
