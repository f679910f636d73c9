package node

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// journalNode is a node with an images directory and handles only.
func journalNode(t *testing.T, limit int64) *Node {
	n := imageNode(t)
	n.sandboxes = map[string]*Sandbox{}
	n.cfg.SessionOutputLimit = limit
	return n
}

// endedSession adds a finished session to sb with output out (stdout in
// pieces, then stderr).
func endedSession(sb *Sandbox, pid uint32, out ...string) *Session {
	_, cancel := context.WithCancel(context.Background())
	s := sb.addSession(pid, SessionSpec{Cmd: []string{"counter"}, Tag: "t"}, cancel)
	for i, o := range out {
		st := Stdout
		if i == len(out)-1 {
			st = Stderr
		}
		s.Journal.Append(st, []byte(o))
	}
	s.finish(End{ExitCode: 7, Error: "done"})
	return s
}

func attachAll(t *testing.T, s *Session, from int64) (string, []Chunk, *End) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var buf bytes.Buffer
	var chunks []Chunk
	end, err := s.Journal.Follow(ctx, from, func(int64, int64) error { return nil }, func(c Chunk) error {
		buf.Write(c.Data)
		chunks = append(chunks, c)
		return nil
	})
	if err != nil {
		t.Fatalf("attach %s from %d: %v", s.ID, from, err)
	}
	return buf.String(), chunks, end
}

// A suspended sandbox's journals travel in its image: the receiving node
// rebuilds its sessions when it resumes the sandbox without a handle.
func TestSessionsTravelWithTheSuspendImage(t *testing.T) {
	a, b := journalNode(t, 1<<20), journalNode(t, 1<<20)
	ctx := context.Background()
	const image = "sb1/suspend"
	mkCheckpoint(t, a, image, true)

	sb := a.newSandbox("sb1", "tok")
	a.register(sb)
	s1 := endedSession(sb, 41, "one\n", "two\n", "oops\n")
	s1.Journal.Skip(100) // output the agent no longer held
	s1.Journal.Append(Stdout, []byte("after the gap\n"))
	endedSession(sb, 42, "x")
	sb.setSuspendImage(image)

	sendErr, recvErr := streamPipe(
		func(w io.Writer) error { return a.SendImage(ctx, image, w) },
		func(r io.Reader) error { return b.ReceiveImage(ctx, image, r) })
	if sendErr != nil || recvErr != nil {
		t.Fatalf("send: %v, receive: %v", sendErr, recvErr)
	}
	dir, _ := b.imagePath(image)
	moved := b.newSandbox("sb1", "tok")
	if err := moved.importSessions(dir); err != nil {
		t.Fatal(err)
	}
	if got := len(moved.Sessions()); got != 2 {
		t.Fatalf("%d sessions arrived, want 2", got)
	}
	got, err := moved.Session(s1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != 41 || got.Spec.Tag != "t" || !got.StartedAt.Equal(s1.StartedAt) || got.EndedAt().IsZero() {
		t.Fatalf("session arrived as %+v", got)
	}
	wantNext, wantFirst, _ := s1.Journal.Status()
	next, first, end := got.Journal.Status()
	if next != wantNext || first != wantFirst || end == nil || end.ExitCode != 7 || end.Error != "done" {
		t.Fatalf("journal arrived at %d..%d ended %+v; want %d..%d, exit 7", first, next, end, wantFirst, wantNext)
	}
	// Attach by offset reads what it read on the first node, byte for
	// byte and stream for stream, gap included.
	for _, from := range []int64{0, 5, 100, 104} {
		wantOut, wantChunks, _ := attachAll(t, s1, from)
		gotOut, gotChunks, gotEnd := attachAll(t, got, from)
		if gotOut != wantOut || len(gotChunks) != len(wantChunks) || gotEnd == nil {
			t.Fatalf("attach from %d: %q in %d chunks, want %q in %d", from, gotOut, len(gotChunks), wantOut, len(wantChunks))
		}
		for i := range gotChunks {
			if gotChunks[i].Stream != wantChunks[i].Stream || gotChunks[i].Offset != wantChunks[i].Offset {
				t.Fatalf("attach from %d: chunk %d is %v@%d, want %v@%d", from, i,
					gotChunks[i].Stream, gotChunks[i].Offset, wantChunks[i].Stream, wantChunks[i].Offset)
			}
		}
	}

	// Sent on from the second node, which holds no handle of it, the
	// image still carries them.
	c := journalNode(t, 1<<20)
	sendErr, recvErr = streamPipe(
		func(w io.Writer) error { return b.SendImage(ctx, image, w) },
		func(r io.Reader) error { return c.ReceiveImage(ctx, image, r) })
	if sendErr != nil || recvErr != nil {
		t.Fatalf("send on: %v, receive: %v", sendErr, recvErr)
	}
	dirC, _ := c.imagePath(image)
	again := c.newSandbox("sb1", "tok")
	if err := again.importSessions(dirC); err != nil || len(again.Sessions()) != 2 {
		t.Fatalf("second hop: %d sessions, %v", len(again.Sessions()), err)
	}

	// An image of no suspended sandbox (a snapshot's) carries none.
	mkCheckpoint(t, a, "sb1/snapshots/s", true)
	d := journalNode(t, 1<<20)
	if _, err := streamPipe(
		func(w io.Writer) error { return a.SendImage(ctx, "sb1/snapshots/s", w) },
		func(r io.Reader) error { return d.ReceiveImage(ctx, "sb1/snapshots/s", r) }); err != nil {
		t.Fatal(err)
	}
	dirD, _ := d.imagePath("sb1/snapshots/s")
	if _, err := os.Stat(filepath.Join(dirD, sessionsFile)); err == nil {
		t.Fatal("a snapshot's image carries sessions")
	}
}

// A node that keeps less output than the sender keeps the newest part.
func TestImportedJournalKeepsItsLimit(t *testing.T) {
	a, b := journalNode(t, 1<<20), journalNode(t, 8)
	const image = "sb1/suspend"
	mkCheckpoint(t, a, image, true)
	sb := a.newSandbox("sb1", "tok")
	a.register(sb)
	endedSession(sb, 9, "aaaa", "bbbb", "cccc")
	sb.setSuspendImage(image)
	ctx := context.Background()
	if _, err := streamPipe(
		func(w io.Writer) error { return a.SendImage(ctx, image, w) },
		func(r io.Reader) error { return b.ReceiveImage(ctx, image, r) }); err != nil {
		t.Fatal(err)
	}
	dir, _ := b.imagePath(image)
	moved := b.newSandbox("sb1", "tok")
	if err := moved.importSessions(dir); err != nil {
		t.Fatal(err)
	}
	s, _ := moved.Session(sessionID(9))
	out, _, _ := attachAll(t, s, 0)
	if next, first, _ := s.Journal.Status(); out != "bbbbcccc" || first != 4 || next != 12 {
		t.Fatalf("journal holds %q at %d..%d, want bbbbcccc at 4..12", out, first, next)
	}
}

// A sessions file whose chunks do not fit its offsets is refused.
func TestImportRefusesBrokenSessions(t *testing.T) {
	n := journalNode(t, 1<<20)
	dir := filepath.Join(t.TempDir(), "img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, js := range map[string]string{
		"past next":   `{"sessions":[{"pid":1,"output_bytes":2,"dropped_bytes":0,"chunks":[{"stream":1,"offset":0,"size":3}]}]}`,
		"backwards":   `{"sessions":[{"pid":1,"output_bytes":9,"dropped_bytes":0,"chunks":[{"stream":1,"offset":2,"size":2},{"stream":1,"offset":0,"size":1}]}]}`,
		"bad stream":  `{"sessions":[{"pid":1,"output_bytes":3,"dropped_bytes":0,"chunks":[{"stream":9,"offset":0,"size":3}]}]}`,
		"short data":  `{"sessions":[{"pid":1,"output_bytes":99,"dropped_bytes":0,"chunks":[{"stream":1,"offset":0,"size":50}]}]}`,
		"bad offsets": `{"sessions":[{"pid":1,"output_bytes":1,"dropped_bytes":5,"chunks":[]}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, sessionsFile), []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sessionsDataFile), []byte("abcdef"), 0o600); err != nil {
			t.Fatal(err)
		}
		sb := n.newSandbox("sb1", "tok")
		if err := sb.importSessions(dir); err == nil {
			t.Errorf("%s: imported", name)
		} else if len(sb.Sessions()) != 0 {
			t.Errorf("%s: refused but kept %d sessions", name, len(sb.Sessions()))
		}
	}
}
