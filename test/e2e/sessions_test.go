package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// A session keeps running while no client watches it; a client that comes
// back from any offset gets exactly the bytes it has not seen.
func TestSessionOutlivesClientAndReattachLosesNothing(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	const lines = 3000
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); if [ $((i %% 500)) = 0 ]; then sleep 0.2; fi; done`, lines)},
	})
	if err != nil {
		t.Fatal(err)
	}

	got, exit := readByReattaching(t, ctx, sb.ID, sess.ID, 5)
	if exit.ExitCode != 0 {
		t.Fatalf("exit code %d", exit.ExitCode)
	}
	want := make([]string, lines)
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i)
	}
	if got != strings.Join(want, "\n")+"\n" {
		gotLines := strings.Split(strings.TrimSpace(got), "\n")
		t.Fatalf("re-attached output has %d lines, want %d exactly once in order (first %q, last %q)",
			len(gotLines), lines, gotLines[0], gotLines[len(gotLines)-1])
	}
	info, err := env.client.GetSession(ctx, sb.ID, sess.ID)
	if err != nil || info.State != apiv1.SessionExited || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("session after exit = %+v, %v", info, err)
	}
}

func TestSessionStdin(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", "tr a-z A-Z"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.client.WriteStdin(ctx, sb.ID, sess.ID, strings.NewReader("hello "), false); err != nil {
		t.Fatal(err)
	}
	if err := env.client.WriteStdin(ctx, sb.ID, sess.ID, strings.NewReader("stdin\n"), true); err != nil {
		t.Fatal(err)
	}
	out, code := collect(t, sb.ID, sess.ID)
	if out != "HELLO STDIN\n" || code != 0 {
		t.Fatalf("output %q exit %d", out, code)
	}
}

func TestSessionSignal(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; while true; do sleep 0.05; done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, sb.ID, sess.ID, "ready")
	if err := env.client.Signal(ctx, sb.ID, sess.ID, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	out, code := collect(t, sb.ID, sess.ID)
	if code != 7 || !strings.Contains(out, "got TERM") {
		t.Fatalf("after SIGTERM: output %q exit %d", out, code)
	}

	sess, err = env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.client.Signal(ctx, sb.ID, sess.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if _, code := collect(t, sb.ID, sess.ID); code == 0 {
		t.Fatal("killed sleep exited 0")
	}
}

func TestSessionPTY(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh"}, TTY: true, Cols: 100, Rows: 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		if err := env.client.WriteStdin(ctx, sb.ID, sess.ID, strings.NewReader(s), false); err != nil {
			t.Fatal(err)
		}
	}
	send("tty; stty size; echo $((6*7))\n")
	waitForOutput(t, sb.ID, sess.ID, "42")
	if err := env.client.Resize(ctx, sb.ID, sess.ID, 120, 40); err != nil {
		t.Fatal(err)
	}
	send("stty size; exit 3\n")
	out, code := collect(t, sb.ID, sess.ID)
	for _, want := range []string{"/dev/pts/", "30 100", "40 120"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q:\n%s", want, out)
		}
	}
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}

// waitForOutput reads a session until its output contains want.
func waitForOutput(t *testing.T, id, sid, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
	defer cancel()
	stream, err := env.client.Attach(ctx, id, sid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("waiting for %q (have %q): %v", want, out.String(), err)
		}
		out.Write(ev.Data)
	}
}

// e2eSessionSpill is the e2e server's spill per session (the default is
// 256 MiB): its journals hold 8 MiB in memory and this much on disk.
const e2eSessionSpill = 8 << 20

// A session that printed more than its journal holds, with nobody
// attached, reports what was dropped: its dropped_bytes, and a truncated
// event to a client that asks for an offset no longer held, before the
// output that is; the exit event's id is where the output ends.
func TestSessionAttachReportsDroppedOutput(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	const total = 24_000_000 // more than the journal's 8 MiB in memory and e2eSessionSpill on disk
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf("yes 0123456789abcdef | head -c %d", total)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var info *apiv1.Session
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err := env.client.GetSession(ctx, sb.ID, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == apiv1.SessionExited {
			info = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session still running: %+v", got)
		}
	}
	if info.OutputBytes != total || info.DroppedBytes <= 0 || info.DroppedBytes >= total {
		t.Fatalf("session after exit: output_bytes %d, dropped_bytes %d; want %d and some dropped", info.OutputBytes, info.DroppedBytes, total)
	}

	// read attaches from offset and returns the truncated event (if any),
	// the output bytes received and the exit event's offset.
	read := func(from int64) (*apiv1.TruncatedEvent, int64, int64) {
		stream, err := env.client.Attach(ctx, sb.ID, sess.ID, from)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var truncated *apiv1.TruncatedEvent
		var received int64
		for {
			ev, err := stream.Next()
			if err != nil {
				t.Fatalf("attach from %d: %v", from, err)
			}
			switch ev.Type {
			case apiv1.EventTruncated:
				if truncated != nil || received > 0 {
					t.Fatalf("attach from %d: truncated event %+v after other events", from, ev.Truncated)
				}
				truncated = ev.Truncated
			case apiv1.EventExit:
				return truncated, received, ev.Offset
			default:
				received += int64(len(ev.Data))
			}
		}
	}
	truncated, received, end := read(0)
	if truncated == nil || truncated.Requested != 0 || truncated.From != info.DroppedBytes {
		t.Fatalf("attach from 0: truncated event %+v, want requested 0 from %d", truncated, info.DroppedBytes)
	}
	if received != total-info.DroppedBytes || end != total {
		t.Fatalf("attach from 0: %d bytes, exit at %d; want %d bytes, exit at %d", received, end, total-info.DroppedBytes, total)
	}
	// From an offset still held: no truncated event, exactly the rest.
	from := info.DroppedBytes + 1000
	if truncated, received, end := read(from); truncated != nil || received != total-from || end != total {
		t.Fatalf("attach from %d: truncated %+v, %d bytes, exit at %d; want none, %d, %d", from, truncated, received, end, total-from, total)
	}
}

// A client attached to a session that prints faster than it reads, and
// that stops reading for a while, holds the process back instead of
// losing output: it reads every byte of more than the journal holds, from
// the spill as it catches up, and no truncated event.
func TestSessionSlowClientLosesNothing(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	const total = 40_000_000 // 2.4 times the journal: 8 MiB in memory, e2eSessionSpill on disk
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf("yes 0123456789abcdef | head -c %d", total)},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := env.client.Attach(ctx, sb.ID, sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var received int64
	paused := false
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("after %d bytes: %v", received, err)
		}
		switch ev.Type {
		case apiv1.EventTruncated:
			t.Fatalf("output dropped under a client that was reading: %+v", *ev.Truncated)
		case apiv1.EventExit:
			if ev.ExitCode != 0 || received != total || ev.Offset != total {
				t.Fatalf("exit %d at %d after %d bytes; want 0 at %d after all of them", ev.ExitCode, ev.Offset, received, total)
			}
			return
		default:
			received += int64(len(ev.Data))
		}
		// A pause shorter than the node's reader timeout (20 s), long
		// enough for the process to fill the journal meanwhile.
		if !paused && received > 1<<20 {
			paused = true
			time.Sleep(5 * time.Second)
			info, err := env.client.GetSession(ctx, sb.ID, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			if info.State == apiv1.SessionExited || info.OutputBytes >= total {
				t.Fatalf("the process went on while its client paused: %+v", info)
			}
		}
	}
}

// readByReattaching reads a session's whole output through a series of
// clients, each taking up to perAttach events and going away, each
// attaching at the offset the one before reached. Dropped output fails
// the test; it returns the output and the exit event.
func readByReattaching(t *testing.T, ctx context.Context, sandboxID, sessionID string, perAttach int) (string, client.Event) {
	t.Helper()
	var got strings.Builder
	var offset int64
	for attach := 0; ; attach++ {
		attachCtx, cancel := context.WithCancel(ctx)
		stream, err := env.client.Attach(attachCtx, sandboxID, sessionID, offset)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		var exit *client.Event
		for n := 0; n < perAttach && exit == nil; n++ {
			ev, err := stream.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("attach %d: %v", attach, err)
			}
			switch ev.Type {
			case apiv1.EventTruncated:
				t.Fatalf("output was dropped: %+v", ev.Truncated)
			case apiv1.EventExit:
				exit = &ev
			default:
				got.Write(ev.Data)
				offset = ev.Offset
			}
		}
		cancel()
		stream.Close()
		if exit != nil {
			return got.String(), *exit
		}
		time.Sleep(20 * time.Millisecond)
	}
}
