package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// What the fake's sandboxes and control plane report: every timed body
// takes fakeBody by the sandbox's clock (an empty one fakeEmpty), every
// claim of a pooled sandbox fakeClaim.
const (
	fakeBody  = 100 * time.Millisecond
	fakeEmpty = 20 * time.Microsecond
	fakeClaim = 2 * time.Millisecond
)

// fakeInside is how the fake's sandboxes run the floors' timed scripts and
// the attach sessions.
type fakeInside struct {
	// noTS: the template's busybox has no ts (exit 127), so the floors
	// fall back to /proc/uptime.
	noTS bool
	// failDD: dd cannot write the disk, so floor_file_1mib's script fails.
	failDD bool
	// sessionExit is the exit code of every session.
	sessionExit int
	// drop is how many bytes each attach reports dropped (a truncated
	// event) before the rest of the output.
	drop int64
	// timed counts the timed scripts run.
	timed int
}

// execIn answers an exec: `true`, `echo hi` and untimed scripts succeed
// with "hi"; timed scripts answer as the clock they ask for would.
func (f *fakeServer) execIn(cmd []string) apiv1.ExecResult {
	if len(cmd) != 3 || cmd[0] != "sh" || cmd[1] != "-c" {
		return apiv1.ExecResult{Stdout: "hi\n"}
	}
	script := cmd[2]
	ts, uptime := strings.HasSuffix(script, "| ts -i %.s"), strings.HasPrefix(script, "read a _ </proc/uptime")
	if !ts && !uptime {
		return apiv1.ExecResult{Stdout: "hi\n"}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inside.timed++
	d := fakeBody
	if strings.Contains(script, "{ :; }") {
		d = fakeEmpty
	}
	fails := f.inside.failDD && strings.Contains(script, "conv=fsync")
	const full = "dd: can't open '/home/user/space-bench-1mib.bin': No space left on device"
	switch {
	case ts && f.inside.noTS:
		return apiv1.ExecResult{ExitCode: 127, Stderr: "sh: ts: not found\n"}
	case ts && fails:
		// The loop's exit leaves the group before its end marker; the
		// pipeline's status is ts's.
		return apiv1.ExecResult{Stdout: "0.000010 ready\n0.050000 begin\n", Stderr: full}
	case ts:
		return apiv1.ExecResult{Stdout: fmt.Sprintf("0.000010 ready\n0.050000 begin\n%.6f end 0\n", d.Seconds())}
	case fails:
		return apiv1.ExecResult{ExitCode: 1, Stderr: full}
	default:
		// /proc/uptime counts hundredths.
		return apiv1.ExecResult{Stdout: fmt.Sprintf("uptime 100.00 %.2f 0\n", 100+d.Seconds())}
	}
}

// fakeSession is a session that prints bytes of output, of which attach
// reports the first drop dropped, and exits with exit.
type fakeSession struct {
	bytes, drop int64
	exit        int
}

func (f *fakeServer) createSession(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSessionRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	if !f.exists(r.PathValue("id")) {
		writeTestJSON(w, http.StatusNotFound, apiv1.Error{Code: 404, Message: "no such sandbox"})
		return
	}
	// cat of attachSource, once per MiB.
	n := int64(strings.Count(strings.Join(req.Cmd, " "), attachSource)) << 20
	if n == 0 {
		writeTestJSON(w, http.StatusBadRequest, apiv1.Error{Code: 400, Message: "the fake runs cat sessions of " + attachSource + " only"})
		return
	}
	f.mu.Lock()
	sid := fmt.Sprintf("sess%d", len(f.sessions)+1)
	f.sessions[r.PathValue("id")+"/"+sid] = fakeSession{bytes: n, drop: f.inside.drop, exit: f.inside.sessionExit}
	f.mu.Unlock()
	writeTestJSON(w, http.StatusCreated, apiv1.Session{ID: sid, Cmd: req.Cmd, State: apiv1.SessionRunning})
}

// attach streams a session's output as the server does: stdout events of
// text chunks, each with the offset after it, then the exit event.
func (f *fakeServer) attach(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	s, ok := f.sessions[r.PathValue("id")+"/"+r.PathValue("sid")]
	f.mu.Unlock()
	if !ok {
		writeTestJSON(w, http.StatusNotFound, apiv1.Error{Code: 404, Message: "no such session"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(name string, id int64, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", name, id, b)
	}
	offset := int64(0)
	if s.drop > 0 {
		offset = s.drop
		event(apiv1.EventTruncated, offset, apiv1.TruncatedEvent{Requested: 0, From: offset})
	}
	for offset < s.bytes {
		n := min(64<<10, s.bytes-offset)
		offset += n
		event(apiv1.EventStdout, offset, apiv1.OutputChunk{Text: strings.Repeat("x", int(n))})
	}
	if s.exit != 0 {
		msg := "head: write error"
		offset += int64(len(msg))
		event(apiv1.EventStderr, offset, apiv1.OutputChunk{Text: msg})
	}
	event(apiv1.EventExit, offset, apiv1.ExitEvent{ExitCode: s.exit})
}
