// Package nodeapitest is the conformance suite of the node contract: Run
// drives any nodeapi.Node (the in-process node, a noderpc client of a
// remote one, or the in-memory Fake this package also provides) through the
// same cases, so that every implementation behaves alike.
package nodeapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/pkg/apiv1"
)

// Harness is the node under test and what the cases need of it.
type Harness struct {
	Node nodeapi.Node
	// Template is a bootable template of the node; sandboxes are created
	// from it with Limits and DiskMB.
	Template nodeapi.TemplateSpec
	Limits   runtime.Limits
	DiskMB   int
	// Real says the node runs real sandboxes: cases that need processes
	// to keep their memory across a checkpoint run only then.
	Real bool
	// EchoServer is the command of a session that listens on TCP port
	// inside a sandbox and sends back what it reads (on busybox, as in
	// minimal: nc -ll -p PORT -e cat); nil skips the DialPort case.
	EchoServer func(port int) []string
	// Kill ends a sandbox's runtime behind the node's back (a crash);
	// nil skips the exit event check.
	Kill func(t *testing.T, id string)
	// NoTransfer skips the transfer case even though Node has the
	// methods (a client whose remote node lacks them).
	NoTransfer bool
	// TemplateName is the name of Template, which the Templates case's
	// recipes build from; empty skips the case, as does a Node without
	// nodeapi.Templates or NoTemplates (a client whose remote node lacks
	// them).
	TemplateName string
	NoTemplates  bool
	// Timeout bounds each case; zero means two minutes.
	Timeout time.Duration
}

// Run runs every case as a subtest; setup is called once per case, so
// cases share nothing but what setup shares.
func Run(t *testing.T, setup func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Exec", testExec},
		{"Files", testFiles},
		{"Sessions", testSessions},
		{"SessionSignalAndTTY", testSessionSignal},
		{"ControlRunning", testControlRunning},
		{"Reconcile", testReconcile},
		{"SuspendResume", testSuspendResume},
		{"CaptureRestoreNewIdentity", testCaptureRestore},
		{"ImagesVolumes", testImagesVolumes},
		{"VolumeFiles", testVolumeFiles},
		{"PersistentVolumes", testPersistentVolumes},
		{"Transfer", testTransfer},
		{"Templates", testTemplates},
		{"InvalidNames", testInvalidNames},
		{"UnknownSandbox", testUnknownSandbox},
		{"Events", testEvents},
		{"Pool", testPool},
		{"Info", testInfo},
		{"Runtimes", testRuntimes},
		{"DialPort", testDialPort},
		{"Agent", testAgent},
		{"Metrics", testMetrics},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := setup(t)
			c.fn(t, h)
		})
	}
}

// caseContext bounds one case.
func caseContext(t *testing.T, h Harness) context.Context {
	d := h.Timeout
	if d == 0 {
		d = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func token() string { return "tok-" + sandboxid.New() }

// unique is a name for an image or volume no other case uses.
func unique(kind string) string { return "nodeapitest-" + kind + "-" + sandboxid.New() }

// sandbox is one sandbox a case created: its id, access token and data
// plane. It is destroyed when the case ends.
type sandbox struct {
	id, token string
	nodeapi.Sandbox
}

func createSpec(h Harness, id, tok string) nodeapi.CreateSpec {
	return nodeapi.CreateSpec{ID: id, Template: h.Template, Limits: h.Limits, DiskMB: h.DiskMB, AccessToken: tok, Network: network.Policy{Offline: true}}
}

func destroyLater(t *testing.T, h Harness, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Node.Destroy(ctx, id); err != nil {
			t.Errorf("destroy %s: %v", id, err)
		}
	})
}

func create(ctx context.Context, t *testing.T, h Harness) sandbox {
	t.Helper()
	id, tok := sandboxid.New(), token()
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: createSpec(h, id, tok)}); err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	destroyLater(t, h, id)
	return sandbox{id: id, token: tok, Sandbox: handle(ctx, t, h, id)}
}

func handle(ctx context.Context, t *testing.T, h Harness, id string) nodeapi.Sandbox {
	t.Helper()
	sb, err := h.Node.Sandbox(ctx, id)
	if err != nil {
		t.Fatalf("sandbox %s: %v", id, err)
	}
	if sb.ID() != id {
		t.Fatalf("sandbox %s: handle says it is %s", id, sb.ID())
	}
	return sb
}

func run(ctx context.Context, t *testing.T, sb nodeapi.Sandbox, cmd ...string) *nodeapi.ExecResult {
	t.Helper()
	res, err := sb.Exec(ctx, nodeapi.ExecSpec{Cmd: cmd, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res
}

func writeFile(ctx context.Context, t *testing.T, sb nodeapi.Sandbox, path, content string) {
	t.Helper()
	if err := sb.WriteFile(ctx, path, "", strings.NewReader(content)); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func readFile(ctx context.Context, t *testing.T, sb nodeapi.Sandbox, path string) string {
	t.Helper()
	body, size, err := sb.ReadFile(ctx, path, "")
	data := readBody(t, "read "+path, body, err)
	// -1 says the size is not known in advance.
	if size != -1 && size != int64(len(data)) {
		t.Fatalf("read %s: size %d announced, %d bytes read", path, size, len(data))
	}
	return string(data)
}

// listInPages lists a directory in pages of two (list starts the page at
// cursor) and checks that it holds the entries named want, each exactly
// once, in at least three pages of at most two, the last without cursor.
func listInPages(t *testing.T, want []string, list func(cursor string) (nodeapi.DirPage, error)) []*filesystempb.EntryInfo {
	t.Helper()
	var entries []*filesystempb.EntryInfo
	var listed []string
	cursor, pages := "", 0
	for {
		page, err := list(cursor)
		if err != nil {
			t.Fatalf("list page %d: %v", pages, err)
		}
		n := 0
		for {
			e, err := page.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("list page %d: %v", pages, err)
			}
			entries, listed = append(entries, e), append(listed, e.GetName())
			n++
		}
		cursor = page.NextCursor()
		_ = page.Close()
		pages++
		if n > 2 {
			t.Fatalf("page %d holds %d entries, limit 2", pages, n)
		}
		if cursor == "" {
			break
		}
		if pages > 10 {
			t.Fatalf("listing does not end: %v", listed)
		}
	}
	slices.Sort(listed)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(listed, want) || pages < 3 {
		t.Fatalf("listed %v in %d pages, want %v in at least 3", listed, pages, want)
	}
	return entries
}

// wantAgentStatus fails unless err is an *AgentError with status.
func wantAgentStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var ae *nodeapi.AgentError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Fatalf("%s: got %v (%T), want an AgentError with status %d", what, err, err, status)
	}
}

// eventually polls cond until it holds or the case's context ends.
func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func testExec(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	res := run(ctx, t, sb, "echo", "hello")
	if string(res.Stdout) != "hello\n" || res.ExitCode != 0 || res.Truncated {
		t.Fatalf("echo hello: %+v", res)
	}
	res = run(ctx, t, sb, "sh", "-c", "echo oops >&2; exit 3")
	if string(res.Stderr) != "oops\n" || len(res.Stdout) != 0 || res.ExitCode != 3 {
		t.Fatalf("sh -c 'echo oops >&2; exit 3': stdout %q stderr %q exit %d", res.Stdout, res.Stderr, res.ExitCode)
	}
	_, err := sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if !errors.Is(err, nodeapi.ErrExecTimeout) {
		t.Fatalf("sleep past its timeout: got %v, want ErrExecTimeout", err)
	}
}

func testFiles(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	const dir = "/tmp/nodeapitest"
	e, err := sb.MakeDir(ctx, dir, "")
	if err != nil {
		t.Fatalf("make dir: %v", err)
	}
	if e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || e.GetName() != "nodeapitest" {
		t.Fatalf("make dir: entry %v", e)
	}
	names := []string{"a.txt", "b.txt", "c.txt", "d.txt", "e.txt"}
	for _, n := range names {
		writeFile(ctx, t, sb, dir+"/"+n, "content of "+n)
	}
	if got := readFile(ctx, t, sb, dir+"/a.txt"); got != "content of a.txt" {
		t.Fatalf("read back %q", got)
	}
	// The file is in the sandbox, not only in the file API.
	if res := run(ctx, t, sb, "cat", dir+"/b.txt"); string(res.Stdout) != "content of b.txt" {
		t.Fatalf("cat in the sandbox: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	st, err := sb.Stat(ctx, dir+"/a.txt", "")
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if st.GetType() != filesystempb.FileType_FILE_TYPE_FILE || st.GetSize() != int64(len("content of a.txt")) || st.GetPath() != dir+"/a.txt" || st.GetName() != "a.txt" {
		t.Fatalf("stat: %v", st)
	}

	listInPages(t, names, func(cursor string) (nodeapi.DirPage, error) {
		return sb.List(ctx, dir, "", nodeapi.ListOptions{Depth: 1, Limit: 2, Cursor: cursor})
	})
	if _, err := sb.List(ctx, dir+"/a.txt", "", nodeapi.ListOptions{}); err == nil {
		t.Fatal("listing a file succeeded")
	}

	moved, err := sb.Move(ctx, dir+"/a.txt", dir+"/moved.txt", "")
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	if moved.GetPath() != dir+"/moved.txt" {
		t.Fatalf("move: entry %v", moved)
	}
	if got := readFile(ctx, t, sb, dir+"/moved.txt"); got != "content of a.txt" {
		t.Fatalf("moved file holds %q", got)
	}
	_, err = sb.Stat(ctx, dir+"/a.txt", "")
	wantAgentStatus(t, "stat of a moved file", err, http.StatusNotFound)
	if err := sb.Remove(ctx, dir+"/moved.txt", ""); err != nil {
		t.Fatalf("remove: %v", err)
	}
	_, _, err = sb.ReadFile(ctx, dir+"/moved.txt", "")
	wantAgentStatus(t, "read of a removed file", err, http.StatusNotFound)
}

// collector gathers a session's output as Attach delivers it, checking
// that offsets follow each other.
type collector struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	next   int64
	stream nodeapi.Stream
	err    error
}

func newCollector(offset int64) *collector { return &collector{next: offset} }

func (c *collector) add(ch nodeapi.Chunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.Offset != c.next && c.err == nil {
		c.err = fmt.Errorf("chunk at offset %d, want %d", ch.Offset, c.next)
	}
	c.next = ch.Offset + int64(len(ch.Data))
	c.stream = ch.Stream
	c.buf.Write(ch.Data)
	return nil
}

func (c *collector) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func (c *collector) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatal(c.err)
	}
}

type attached struct {
	end *nodeapi.End
	err error
}

func attach(ctx context.Context, sb nodeapi.Sandbox, sid string, c *collector, offset int64) <-chan attached {
	done := make(chan attached, 1)
	go func() {
		end, err := sb.Attach(ctx, sid, offset, nil, c.add)
		done <- attached{end, err}
	}()
	return done
}

func waitEnd(ctx context.Context, t *testing.T, what string, done <-chan attached) *nodeapi.End {
	t.Helper()
	select {
	case a := <-done:
		if a.err != nil || a.end == nil {
			t.Fatalf("%s: attach ended with %v, end %v", what, a.err, a.end)
		}
		return a.end
	case <-ctx.Done():
		t.Fatalf("%s: the process did not end", what)
	}
	return nil
}

func testSessions(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	info, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: []string{"sh", "-c", "echo one; echo two; cat; exit 7"}, Stdin: true, Tag: "conformance"})
	if err != nil {
		t.Fatalf("start session: %v", err)
	}
	if info.ID == "" || info.StartedAt.IsZero() || info.End != nil {
		t.Fatalf("started session: %+v", info)
	}
	c := newCollector(0)
	done := attach(ctx, sb, info.ID, c, 0)
	eventually(ctx, t, "the session's first lines", func() bool { return c.String() == "one\ntwo\n" })
	if err := sb.WriteStdin(ctx, info.ID, []byte("three\n")); err != nil {
		t.Fatalf("write stdin: %v", err)
	}
	eventually(ctx, t, "the line sent to stdin", func() bool { return c.String() == "one\ntwo\nthree\n" })
	if err := sb.CloseStdin(ctx, info.ID); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	if end := waitEnd(ctx, t, "attach from 0", done); end.ExitCode != 7 {
		t.Fatalf("exit code %d, want 7", end.ExitCode)
	}
	c.check(t)

	// From the middle of the journal, once the process ended.
	mid := newCollector(4)
	if end := waitEnd(ctx, t, "attach from 4", attach(ctx, sb, info.ID, mid, 4)); end.ExitCode != 7 {
		t.Fatalf("attach from 4: exit code %d", end.ExitCode)
	}
	mid.check(t)
	if got := mid.String(); got != "two\nthree\n" {
		t.Fatalf("attach from 4 read %q", got)
	}

	got, err := sb.Session(ctx, info.ID)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	if got.End == nil || got.End.ExitCode != 7 || got.EndedAt.IsZero() || got.OutputBytes != 14 || got.Spec.Tag != "conformance" {
		t.Fatalf("ended session: %+v (end %v)", got, got.End)
	}
	list, err := sb.Sessions(ctx)
	if err != nil {
		t.Fatalf("sessions: %v", err)
	}
	if !slices.ContainsFunc(list, func(s nodeapi.SessionInfo) bool { return s.ID == info.ID }) {
		t.Fatalf("sessions %+v lack %s", list, info.ID)
	}
	if _, err := sb.Session(ctx, "no-such-session"); !errors.Is(err, nodeapi.ErrNoSession) {
		t.Fatalf("unknown session: got %v, want ErrNoSession", err)
	}
	if err := sb.Signal(ctx, "no-such-session", 15); !errors.Is(err, nodeapi.ErrNoSession) {
		t.Fatalf("signal to an unknown session: got %v, want ErrNoSession", err)
	}
}

func testSessionSignal(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	info, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: []string{"sleep", "60"}})
	if err != nil {
		t.Fatalf("start session: %v", err)
	}
	done := attach(ctx, sb, info.ID, newCollector(0), 0)
	if err := sb.Signal(ctx, info.ID, 15); err != nil {
		t.Fatalf("signal: %v", err)
	}
	if end := waitEnd(ctx, t, "signalled sleep", done); end.ExitCode == 0 && end.Error == "" {
		t.Fatalf("a signalled process ended as a success: %+v", end)
	}

	tty, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: []string{"cat"}, TTY: true, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("start tty session: %v", err)
	}
	if err := sb.Resize(ctx, tty.ID, 120, 40); err != nil {
		t.Fatalf("resize: %v", err)
	}
	c := newCollector(0)
	done = attach(ctx, sb, tty.ID, c, 0)
	if err := sb.WriteStdin(ctx, tty.ID, []byte("typed\n")); err != nil {
		t.Fatalf("write to the terminal: %v", err)
	}
	eventually(ctx, t, "the terminal's echo", func() bool { return strings.Contains(c.String(), "typed") })
	c.mu.Lock()
	stream := c.stream
	c.mu.Unlock()
	if stream != nodeapi.PTY {
		t.Fatalf("terminal output on stream %d, want PTY", stream)
	}
	if err := sb.Signal(ctx, tty.ID, 9); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitEnd(ctx, t, "killed terminal", done)
}

func testControlRunning(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	if err := h.Node.Pause(ctx, sb.id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if paused, err := h.Node.Paused(ctx, sb.id); err != nil || !paused {
		t.Fatalf("paused after pause: %v, %v", paused, err)
	}
	if err := h.Node.Resume(ctx, sb.id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if paused, err := h.Node.Paused(ctx, sb.id); err != nil || paused {
		t.Fatalf("paused after resume: %v, %v", paused, err)
	}
	if res := run(ctx, t, sb, "echo", "awake"); string(res.Stdout) != "awake\n" {
		t.Fatalf("exec after resume: %q", res.Stdout)
	}
	st, err := h.Node.Stats(ctx, sb.id)
	if err != nil || st.MemoryBytes == 0 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	if err := h.Node.SetNetwork(ctx, sb.id, network.Policy{Offline: true, Limits: network.Limits{MaxConnections: 10}}); err != nil {
		t.Fatalf("set network: %v", err)
	}
	// A new identity: the agent takes the new token and refuses the old.
	newToken := token()
	if err := h.Node.Rekey(ctx, sb.id, nodeapi.Identity{AccessToken: newToken, Info: map[string]string{"sandbox_id": sb.id}}); err != nil {
		t.Fatalf("rekey: %v", err)
	}
	writeFile(ctx, t, sb, "/tmp/rekeyed.txt", "rekeyed")
	if status, body := agentGet(ctx, t, sb, "/tmp/rekeyed.txt", newToken); status != http.StatusOK || body != "rekeyed" {
		t.Fatalf("agent with the new token: %d %q", status, body)
	}
	if status, _ := agentGet(ctx, t, sb, "/tmp/rekeyed.txt", sb.token); status != http.StatusUnauthorized {
		t.Fatalf("agent with the old token: %d, want 401", status)
	}
}

// testReconcile checks the outcomes of a reconcile after a crash
// (nodeapi.Reconcile): a running sandbox is adopted and keeps working,
// one an interrupted pause left frozen runs again, a paused one stays
// paused, what the control plane finishes itself is left alone, a
// sandbox with no runtime is gone; and each answer is the same the
// second time.
func testReconcile(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	writeFile(ctx, t, sb, "/tmp/before.txt", "before")
	reconcile := func(state string, want nodeapi.ReconcileOutcome) {
		t.Helper()
		for range 2 {
			res, err := h.Node.Reconcile(ctx, nodeapi.ReconcileRequest{ID: sb.id, AccessToken: sb.token, State: state})
			if err != nil || res.Outcome != want || res.Reverted {
				t.Fatalf("reconcile of a sandbox recorded %s: %+v, %v; want %s", state, res, err, want)
			}
		}
	}
	reconcile(apiv1.StateRunning, nodeapi.ReconcileRunning)
	if got := readFile(ctx, t, handle(ctx, t, h, sb.id), "/tmp/before.txt"); got != "before" {
		t.Fatalf("a file after the reconcile: %q", got)
	}
	if err := h.Node.Pause(ctx, sb.id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	reconcile(apiv1.StatePaused, nodeapi.ReconcilePaused)
	if paused, err := h.Node.Paused(ctx, sb.id); err != nil || !paused {
		t.Fatalf("a sandbox recorded paused after its reconcile: paused %v, %v", paused, err)
	}
	reconcile(apiv1.StatePausing, nodeapi.ReconcileRunning)
	if paused, err := h.Node.Paused(ctx, sb.id); err != nil || paused {
		t.Fatalf("an interrupted pause after its reconcile: paused %v, %v", paused, err)
	}
	if res := run(ctx, t, handle(ctx, t, h, sb.id), "echo", "awake"); string(res.Stdout) != "awake\n" {
		t.Fatalf("exec after the reconciles: %q", res.Stdout)
	}
	reconcile(apiv1.StateStarting, nodeapi.ReconcileUntouched)
	reconcile(apiv1.StateStopping, nodeapi.ReconcileUntouched)
	if ids, err := h.Node.Sandboxes(ctx); err != nil || !slices.Contains(ids, sb.id) {
		t.Fatalf("a reconcile of a start or stop touched the runtime: %v, %v", ids, err)
	}
	// A suspend whose image is not there was torn: the sandbox runs on.
	res, err := h.Node.Reconcile(ctx, nodeapi.ReconcileRequest{ID: sb.id, AccessToken: sb.token, State: apiv1.StateSuspending, Image: unique("image")})
	if err != nil || res.Outcome != nodeapi.ReconcileRunning {
		t.Fatalf("reconcile of a torn suspend: %+v, %v", res, err)
	}
	if err := h.Node.Halt(ctx, sb.id); err != nil {
		t.Fatalf("halt: %v", err)
	}
	reconcile(apiv1.StateRunning, nodeapi.ReconcileGone)
	if _, err := h.Node.Reconcile(ctx, nodeapi.ReconcileRequest{ID: "../escape", State: apiv1.StateRunning}); err == nil {
		t.Fatal("a reconcile of an invalid id was accepted")
	}
}

// counter is a session that writes an increasing count to /tmp/counter.
var counter = []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.tmp; mv /tmp/counter.tmp /tmp/counter; sleep 0.1; done"}

func readCounter(ctx context.Context, t *testing.T, sb nodeapi.Sandbox) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(readFile(ctx, t, sb, "/tmp/counter")))
	if err != nil {
		t.Fatalf("counter: %v", err)
	}
	return n
}

// startCounter starts counter and waits until it counted.
func startCounter(ctx context.Context, t *testing.T, sb nodeapi.Sandbox) int {
	t.Helper()
	if _, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: counter}); err != nil {
		t.Fatalf("start counter: %v", err)
	}
	var n int
	eventually(ctx, t, "the counter to count", func() bool {
		if _, err := sb.Stat(ctx, "/tmp/counter", ""); err != nil {
			return false
		}
		n = readCounter(ctx, t, sb)
		return n >= 3
	})
	return n
}

// counterGoesOn checks that the counter went on from at least before.
func counterGoesOn(ctx context.Context, t *testing.T, sb nodeapi.Sandbox, before int) {
	t.Helper()
	first := readCounter(ctx, t, sb)
	if first < before {
		t.Fatalf("counter at %d after the restore, was %d: the process started over", first, before)
	}
	eventually(ctx, t, "the restored counter to go on", func() bool { return readCounter(ctx, t, sb) > first })
}

// fillSandbox gives a sandbox state a checkpoint must keep: a file at
// path and, on a real node, a counting process (whose count it returns).
func fillSandbox(ctx context.Context, t *testing.T, h Harness, sb nodeapi.Sandbox, path string) int {
	t.Helper()
	writeFile(ctx, t, sb, path, "state of "+path)
	if !h.Real {
		return 0
	}
	return startCounter(ctx, t, sb)
}

// checkRestored checks that a restored sandbox has what fillSandbox gave.
func checkRestored(ctx context.Context, t *testing.T, h Harness, sb nodeapi.Sandbox, path string, count int) {
	t.Helper()
	if got := readFile(ctx, t, sb, path); got != "state of "+path {
		t.Fatalf("%s after the restore: %q", path, got)
	}
	if h.Real {
		counterGoesOn(ctx, t, sb, count)
	}
}

func testSuspendResume(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	count := fillSandbox(ctx, t, h, sb, "/tmp/kept.txt")
	image := unique("image")
	t.Cleanup(func() { _ = h.Node.DeleteImage(context.Background(), image) })
	if err := h.Node.Suspend(ctx, sb.id, image); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if ids, err := h.Node.Sandboxes(ctx); err != nil || slices.Contains(ids, sb.id) {
		t.Fatalf("the runtime still runs %s after its suspend: %v, %v", sb.id, ids, err)
	}
	if info, err := h.Node.Image(ctx, image); err != nil || !info.Complete || info.SizeBytes <= 0 {
		t.Fatalf("image after suspend: %+v, %v", info, err)
	}
	// A reconcile that finds the suspend done (a crash before the
	// control plane recorded it) settles it as suspended, twice.
	for range 2 {
		res, err := h.Node.Reconcile(ctx, nodeapi.ReconcileRequest{ID: sb.id, AccessToken: sb.token, State: apiv1.StateSuspending, Image: image})
		if err != nil || res.Outcome != nodeapi.ReconcileSuspended {
			t.Fatalf("reconcile a finished suspend: %+v, %v", res, err)
		}
	}
	err := h.Node.ResumeFrom(ctx, nodeapi.RestoreSpec{ID: sb.id, Image: image, Limits: h.Limits, DiskMB: h.DiskMB, AccessToken: sb.token, Network: network.Policy{Offline: true}})
	if err != nil {
		t.Fatalf("resume from image: %v", err)
	}
	restored := handle(ctx, t, h, sb.id)
	checkRestored(ctx, t, h, restored, "/tmp/kept.txt", count)
}

// capture checkpoints sandbox id into an image and a volume of their own,
// deleted when the case ends.
func capture(ctx context.Context, t *testing.T, h Harness, id string) (image, volume string) {
	t.Helper()
	image, volume = unique("image"), unique("volume")
	t.Cleanup(func() {
		_ = h.Node.DeleteImage(context.Background(), image)
		_ = h.Node.DeleteVolume(context.Background(), volume)
	})
	if err := h.Node.Capture(ctx, nodeapi.CaptureRequest{ID: id, Volume: volume, Image: image}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	return image, volume
}

func testCaptureRestore(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	count := fillSandbox(ctx, t, h, sb, "/tmp/captured.txt")
	image, volume := capture(ctx, t, h, sb.id)
	// The source runs on, and what it does now is not in the capture.
	writeFile(ctx, t, sb, "/tmp/later.txt", "later")
	if res := run(ctx, t, sb, "echo", "still"); string(res.Stdout) != "still\n" {
		t.Fatalf("source after capture: %q", res.Stdout)
	}

	id, newToken := sandboxid.New(), token()
	err := h.Node.ResumeFrom(ctx, nodeapi.RestoreSpec{
		ID: id, Image: image, FromVolume: volume, Limits: h.Limits, DiskMB: h.DiskMB, AccessToken: sb.token,
		NewIdentity: &nodeapi.Identity{AccessToken: newToken, Env: map[string]string{"BRANCH": "1"}, Info: map[string]string{"sandbox_id": id}},
		Network:     network.Policy{Offline: true},
	})
	if err != nil {
		t.Fatalf("restore as %s: %v", id, err)
	}
	destroyLater(t, h, id)
	branch := sandbox{id: id, token: newToken, Sandbox: handle(ctx, t, h, id)}
	checkRestored(ctx, t, h, branch, "/tmp/captured.txt", count)
	if _, err := branch.Stat(ctx, "/tmp/later.txt", ""); err == nil {
		t.Fatal("the restored copy holds a file written after the capture")
	}
	if status, _ := agentGet(ctx, t, branch, "/tmp/captured.txt", newToken); status != http.StatusOK {
		t.Fatalf("restored copy's agent with its new token: %d", status)
	}
	if status, _ := agentGet(ctx, t, branch, "/tmp/captured.txt", sb.token); status != http.StatusUnauthorized {
		t.Fatalf("restored copy's agent with the source's token: %d, want 401", status)
	}
}

func testImagesVolumes(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	// Volumes nest: the listing of dir holds the volume by its full name.
	dir := unique("volumes")
	image, volume := unique("image"), dir+"/captured"
	t.Cleanup(func() {
		_ = h.Node.DeleteImage(context.Background(), image)
		_ = h.Node.DeleteVolume(context.Background(), volume)
	})
	if err := h.Node.Capture(ctx, nodeapi.CaptureRequest{ID: sb.id, Volume: volume, Image: image}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	images, err := h.Node.Images(ctx)
	if err != nil || !slices.Contains(images, image) {
		t.Fatalf("images %v (%v) lack %s", images, err, image)
	}
	if vols, err := h.Node.Volumes(ctx, dir); err != nil || !slices.Equal(vols, []string{volume}) {
		t.Fatalf("volumes under %s: %v, %v", dir, vols, err)
	}
	if ok, err := h.Node.VolumeExists(ctx, volume); err != nil || !ok {
		t.Fatalf("volume exists: %v, %v", ok, err)
	}
	for i := 0; i < 2; i++ { // deleting what is gone is no error
		if err := h.Node.DeleteVolume(ctx, volume); err != nil {
			t.Fatalf("delete volume (%d): %v", i, err)
		}
		if err := h.Node.DeleteImage(ctx, image); err != nil {
			t.Fatalf("delete image (%d): %v", i, err)
		}
	}
	if ok, err := h.Node.VolumeExists(ctx, volume); err != nil || ok {
		t.Fatalf("deleted volume exists: %v, %v", ok, err)
	}
	if info, err := h.Node.Image(ctx, image); err != nil || info.Complete {
		t.Fatalf("deleted image: %+v, %v", info, err)
	}
	if images, _ := h.Node.Images(ctx); slices.Contains(images, image) {
		t.Fatalf("images %v still hold %s", images, image)
	}
}

// readVolumeFile reads a path of a volume whole.
func readVolumeFile(ctx context.Context, t *testing.T, h Harness, volume, path string) (string, *filesystempb.EntryInfo) {
	t.Helper()
	body, e, err := h.Node.ReadVolumeFile(ctx, volume, path)
	return string(readBody(t, "read "+path+" in the volume", body, err)), e
}

// readBody reads and closes the body a read opened (err is the open's).
func readBody(t *testing.T, what string, body io.ReadCloser, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return data
}

// wantRefused fails unless err is an *AgentError with status that names
// neither the volume nor anything of the node's own directories.
func wantRefused(t *testing.T, what string, err error, status int, volume string) {
	t.Helper()
	wantAgentStatus(t, what, err, status)
	if strings.Contains(err.Error(), volume) {
		t.Fatalf("%s: the error names where the node keeps the volume: %v", what, err)
	}
}

// testVolumeFiles reads the files of a captured volume, as the API serves
// a snapshot's files: a file, a directory in pages, and nothing outside
// the volume, whatever ".." or symlinks the path goes through.
func testVolumeFiles(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	// Not /tmp: a sandbox's /tmp may be memory, which a volume lacks.
	const dir = "/home/user/volfiles"
	names := []string{"a.txt", "b.txt", "c.txt", "d.txt", "e.txt"}
	for _, n := range names {
		writeFile(ctx, t, sb, dir+"/"+n, "content of "+n)
	}
	links := map[string]bool{}
	if h.Real {
		// Symlinks the sandbox plants that point above its root: an
		// absolute one and a relative one.
		res := run(ctx, t, sb, "sh", "-c", "ln -s /../../../../../../etc "+dir+"/up && ln -s ../../../../../../../../etc/hostname "+dir+"/rel")
		if res.ExitCode != 0 {
			t.Fatalf("ln: %d %s", res.ExitCode, res.Stderr)
		}
		links["up"], links["rel"] = true, true
	}
	_, volume := capture(ctx, t, h, sb.id)
	// What the sandbox does after the capture is not in the volume.
	writeFile(ctx, t, sb, dir+"/a.txt", "changed")
	writeFile(ctx, t, sb, dir+"/later.txt", "later")

	got, e := readVolumeFile(ctx, t, h, volume, dir+"/a.txt")
	if got != "content of a.txt" {
		t.Fatalf("file of the volume holds %q", got)
	}
	if e.GetType() != filesystempb.FileType_FILE_TYPE_FILE || e.GetName() != "a.txt" || e.GetPath() != dir+"/a.txt" || e.GetSize() != int64(len(got)) {
		t.Fatalf("entry of a file: %v", e)
	}
	// ".." stops at the volume's root, as it stops at "/" in the sandbox.
	if got, _ := readVolumeFile(ctx, t, h, volume, "/../../.."+dir+"/../volfiles/b.txt"); got != "content of b.txt" {
		t.Fatalf("file through ..: %q", got)
	}
	if got, e := readVolumeFile(ctx, t, h, volume, dir); got != "" || e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("directory read as %q, entry %v", got, e)
	}

	want := slices.Clone(names)
	for l := range links {
		want = append(want, l)
	}
	entries := listInPages(t, want, func(cursor string) (nodeapi.DirPage, error) {
		return h.Node.ListVolumeDir(ctx, volume, dir, nodeapi.ListOptions{Limit: 2, Cursor: cursor})
	})
	for _, e := range entries {
		if e.GetPath() != dir+"/"+e.GetName() {
			t.Fatalf("entry %v: path is not below %s", e, dir)
		}
		if links[e.GetName()] != (e.GetType() == filesystempb.FileType_FILE_TYPE_SYMLINK) {
			t.Fatalf("entry %v: a symlink must be listed as one, and only a symlink", e)
		}
	}
	// A page closed before its end releases what it holds.
	page, err := h.Node.ListVolumeDir(ctx, volume, dir, nodeapi.ListOptions{Limit: 1})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if err := page.Close(); err != nil {
		t.Fatalf("close an unread page: %v", err)
	}

	_, _, err = h.Node.ReadVolumeFile(ctx, volume, dir+"/later.txt")
	wantRefused(t, "read of a file written after the capture", err, http.StatusNotFound, volume)
	_, err = h.Node.ListVolumeDir(ctx, volume, dir+"/missing", nodeapi.ListOptions{})
	wantRefused(t, "listing of a missing directory", err, http.StatusNotFound, volume)
	_, err = h.Node.ListVolumeDir(ctx, volume, dir+"/a.txt", nodeapi.ListOptions{})
	wantRefused(t, "listing of a file", err, http.StatusBadRequest, volume)
	_, _, err = h.Node.ReadVolumeFile(ctx, volume, "home/user/volfiles/a.txt")
	wantRefused(t, "read of a relative path", err, http.StatusBadRequest, volume)
	gone := unique("volume")
	_, _, err = h.Node.ReadVolumeFile(ctx, gone, dir+"/a.txt")
	wantRefused(t, "read in a missing volume", err, http.StatusNotFound, gone)
	_, err = h.Node.ListVolumeDir(ctx, gone, dir, nodeapi.ListOptions{})
	wantRefused(t, "listing in a missing volume", err, http.StatusNotFound, gone)
	if !h.Real {
		return
	}
	// A symlink that leads above the volume's root is not followed.
	for _, p := range []string{dir + "/up/hostname", dir + "/rel"} {
		_, _, err = h.Node.ReadVolumeFile(ctx, volume, p)
		wantRefused(t, "read through "+p, err, http.StatusBadRequest, volume)
	}
	_, err = h.Node.ListVolumeDir(ctx, volume, dir+"/up", nodeapi.ListOptions{})
	wantRefused(t, "listing through "+dir+"/up", err, http.StatusBadRequest, volume)
}

func testInvalidNames(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	for _, name := range []string{"", "../escape", "a/../../b", "/abs", "a//b", "sp ace", strings.Repeat("x", 256)} {
		checks := map[string]error{}
		_, checks["Image"] = h.Node.Image(ctx, name)
		checks["DeleteImage"] = h.Node.DeleteImage(ctx, name)
		_, checks["VolumeExists"] = h.Node.VolumeExists(ctx, name)
		checks["DeleteVolume"] = h.Node.DeleteVolume(ctx, name)
		checks["DropTemplateImage"] = h.Node.DropTemplateImage(ctx, name)
		_, _, checks["ReadVolumeFile"] = h.Node.ReadVolumeFile(ctx, name, "/")
		_, checks["ListVolumeDir"] = h.Node.ListVolumeDir(ctx, name, "/", nodeapi.ListOptions{})
		for op, err := range checks {
			if !errors.Is(err, nodeapi.ErrInvalidName) {
				t.Errorf("%s(%q): got %v, want ErrInvalidName", op, name, err)
			}
		}
	}
}

func testUnknownSandbox(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	id := sandboxid.New()
	// Either Sandbox refuses the id or every call of its handle does.
	for range 2 {
		sb, err := h.Node.Sandbox(ctx, id)
		if err == nil {
			_, err = sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"true"}, Timeout: time.Second})
		}
		if !errors.Is(err, nodeapi.ErrNoSandbox) {
			t.Fatalf("an unknown id: got %v, want ErrNoSandbox", err)
		}
	}
	ids, err := h.Node.Sandboxes(ctx)
	if err != nil || slices.Contains(ids, id) {
		t.Fatalf("sandboxes: %v, %v", ids, err)
	}
}

// waitEvent reads events until one matches.
func waitEvent(ctx context.Context, t *testing.T, events <-chan nodeapi.Event, what string, match func(nodeapi.Event) bool) nodeapi.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("events closed while waiting for %s", what)
			}
			if match(ev) {
				if ev.Time.IsZero() {
					t.Fatalf("%s event without a time: %+v", what, ev)
				}
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", what)
		}
	}
}

func testEvents(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	subCtx, unsubscribe := context.WithCancel(ctx)
	defer unsubscribe()
	events, err := h.Node.Events(subCtx)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	sb := create(ctx, t, h)
	if _, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: []string{"echo", "busy"}}); err != nil {
		t.Fatalf("start session: %v", err)
	}
	waitEvent(ctx, t, events, "activity", func(ev nodeapi.Event) bool {
		return ev.Type == nodeapi.EventActivity && ev.Sandbox == sb.id
	})
	if h.Kill != nil {
		h.Kill(t, sb.id)
		waitEvent(ctx, t, events, "exit", func(ev nodeapi.Event) bool {
			return ev.Type == nodeapi.EventExit && ev.Sandbox == sb.id
		})
	}
	// Ending the subscription closes the channel.
	unsubscribe()
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-ctx.Done():
			t.Fatal("events still open after the subscription ended")
		}
	}
}

func testPool(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	events, err := h.Node.Events(ctx)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	limits := nodeapi.PoolLimits{Limits: h.Limits, DiskMB: h.DiskMB}
	req := nodeapi.PoolRequest{Template: h.Template, Limits: limits, Waiting: network.Policy{Hold: true}, Size: 1}
	if err := h.Node.SetPool(ctx, req); err != nil {
		t.Fatalf("set pool: %v", err)
	}
	t.Cleanup(func() {
		req.Size = 0
		if err := h.Node.SetPool(context.Background(), req); err != nil {
			t.Errorf("empty the pool: %v", err)
		}
	})
	waitEvent(ctx, t, events, "pool", func(ev nodeapi.Event) bool {
		return ev.Type == nodeapi.EventPool && ev.TemplateID == h.Template.ID && ev.Pool != nil && ev.Pool.Size == 1
	})
	eventually(ctx, t, "a pooled sandbox", func() bool {
		st, err := h.Node.Pool(ctx, h.Template.ID)
		return err == nil && st.Size == 1 && st.Ready == 1
	})
	if info, err := h.Node.Info(ctx); err != nil || info.Pools[h.Template.ID].Ready != 1 {
		t.Fatalf("info pools %v, %v", info.Pools, err)
	}
	other := limits
	other.Limits.MemoryMB++
	if res, err := h.Node.Claim(ctx, nodeapi.ClaimRequest{TemplateID: h.Template.ID, Limits: other, Identity: nodeapi.Identity{AccessToken: token()}}); err != nil || res.Claimed {
		t.Fatalf("claim with other limits: %+v, %v", res, err)
	}
	tok := token()
	res, err := h.Node.Claim(ctx, nodeapi.ClaimRequest{TemplateID: h.Template.ID, Limits: limits, Identity: nodeapi.Identity{AccessToken: tok}, Network: network.Policy{Offline: true}})
	if err != nil || !res.Claimed || res.ID == "" {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	destroyLater(t, h, res.ID)
	sb := sandbox{id: res.ID, token: tok, Sandbox: handle(ctx, t, h, res.ID)}
	if out := run(ctx, t, sb, "echo", "claimed"); string(out.Stdout) != "claimed\n" {
		t.Fatalf("exec in the claimed sandbox: %q", out.Stdout)
	}
	writeFile(ctx, t, sb, "/tmp/claimed.txt", "mine")
	if status, _ := agentGet(ctx, t, sb, "/tmp/claimed.txt", tok); status != http.StatusOK {
		t.Fatalf("claimed sandbox's agent with the claim's token: %d", status)
	}
}

func testInfo(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	info, err := h.Node.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.ID == "" || info.VCPUs <= 0 || info.MemoryMB <= 0 || info.DiskMB <= 0 || info.Sandboxes < 1 {
		t.Fatalf("info: %+v", info)
	}
	ids, err := h.Node.Sandboxes(ctx)
	if err != nil || !slices.Contains(ids, sb.id) {
		t.Fatalf("sandboxes %v (%v) lack %s", ids, err, sb.id)
	}
}

// testRuntimes: the node says which backends it has and what each
// isolates with; a create names one of its template's, and one the
// template lacks, or the node lacks, is refused as such.
func testRuntimes(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	info, err := h.Node.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.Runtimes[runtime.GVisor] != runtime.IsolationGVisor {
		t.Fatalf("info runtimes %v; want gvisor, isolated by gvisor", info.Runtimes)
	}
	spec := createSpec(h, sandboxid.New(), token())
	spec.Runtime = runtime.GVisor
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: spec}); err != nil {
		t.Fatalf("create on gvisor: %v", err)
	}
	destroyLater(t, h, spec.ID)
	lacking := createSpec(h, sandboxid.New(), token())
	lacking.Runtime = runtime.MicroVM
	err = h.Node.Create(ctx, nodeapi.CreateRequest{Spec: lacking})
	if !errors.Is(err, nodeapi.ErrNoRuntime) || !strings.Contains(err.Error(), "has no microvm runtime") {
		t.Fatalf("create on a runtime the template lacks: %v; want ErrNoRuntime", err)
	}
	if _, ok := info.Runtimes[runtime.MicroVM]; !ok {
		lacking.Template.Runtimes = []string{runtime.MicroVM, runtime.GVisor}
		err = h.Node.Create(ctx, nodeapi.CreateRequest{Spec: lacking})
		if !errors.Is(err, nodeapi.ErrNoRuntime) || !strings.Contains(err.Error(), "this node has no microvm runtime") {
			t.Fatalf("create on microvm on a node without it: %v; want ErrNoRuntime", err)
		}
	}
	ids, _ := h.Node.Sandboxes(ctx)
	if slices.Contains(ids, lacking.ID) {
		_ = h.Node.Destroy(ctx, lacking.ID)
		t.Fatal("a refused create left a sandbox")
	}
}

func testDialPort(t *testing.T, h Harness) {
	if h.EchoServer == nil {
		t.Skip("the harness has no echo server command")
	}
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	const port = 7788
	if _, err := sb.DialPort(ctx, port); err == nil {
		t.Fatal("dial a port nothing listens on succeeded")
	}
	server, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: h.EchoServer(port)})
	if err != nil {
		t.Fatalf("start echo server: %v", err)
	}
	var conn interface {
		io.ReadWriteCloser
		SetDeadline(time.Time) error
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for conn == nil {
		c, err := sb.DialPort(waitCtx, port)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-waitCtx.Done():
			info, _ := sb.Session(ctx, server.ID)
			t.Fatalf("the echo server %q does not listen (%v); its session: %+v end %v", h.EchoServer(port), err, info, info.End)
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatalf("write to the port: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q, %v", buf, err)
	}

	// The connection ends with the sandbox: a proxied request in flight
	// fails at once rather than hang on a network stack that is gone.
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := h.Node.Destroy(ctx, sb.ID()); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	began := time.Now()
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("read %q from a destroyed sandbox's port", buf[:n])
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection to a destroyed sandbox's port stays open (%s)", time.Since(began).Round(time.Millisecond))
	}
}

// agentGet reads a file through the sandbox's agent route, presenting tok.
func agentGet(ctx context.Context, t *testing.T, sb nodeapi.Sandbox, path, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox/files?path="+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Access-Token", tok)
	resp, err := sb.Agent().RoundTrip(req)
	if err != nil {
		t.Fatalf("agent request: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("agent response: %v", err)
	}
	return resp.StatusCode, string(body)
}

func testAgent(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	writeFile(ctx, t, sb, "/tmp/agent.txt", "through the agent")
	if status, body := agentGet(ctx, t, sb, "/tmp/agent.txt", sb.token); status != http.StatusOK || body != "through the agent" {
		t.Fatalf("agent with the sandbox's token: %d %q", status, body)
	}
	if status, _ := agentGet(ctx, t, sb, "/tmp/agent.txt", "wrong"); status != http.StatusUnauthorized {
		t.Fatalf("agent with a wrong token: %d, want 401", status)
	}
}

// failing is a stream that breaks after some bytes.
func failing() io.Reader {
	return io.MultiReader(strings.NewReader(strings.Repeat("x", 100<<10)), iotestErr{})
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("the stream broke") }

// through copies what send writes into receive, as one node's Send* feeds
// another's Receive*.
func through(send func(io.Writer) error, receive func(io.Reader) error) error {
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		err := send(pw)
		pw.CloseWithError(err)
		sent <- err
	}()
	err := receive(pr)
	_ = pr.Close()
	if serr := <-sent; serr != nil && err == nil {
		err = serr
	}
	return err
}

func testTransfer(t *testing.T, h Harness) {
	tr, ok := h.Node.(nodeapi.Transfer)
	if !ok || h.NoTransfer {
		t.Skip("the node does not transfer volumes or images")
	}
	ctx := caseContext(t, h)
	sb := create(ctx, t, h)
	count := fillSandbox(ctx, t, h, sb, "/tmp/shipped.txt")
	image, volume := unique("image"), unique("volume")
	image2, volume2 := image+"-received", volume+"-received"
	t.Cleanup(func() {
		for _, v := range []string{volume, volume2} {
			_ = h.Node.DeleteVolume(context.Background(), v)
		}
		for _, i := range []string{image, image2} {
			_ = h.Node.DeleteImage(context.Background(), i)
		}
	})
	if err := h.Node.Capture(ctx, nodeapi.CaptureRequest{ID: sb.id, Volume: volume, Image: image}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	sendVolume := func(w io.Writer) error { return tr.SendVolume(ctx, volume, w) }
	sendImage := func(w io.Writer) error { return tr.SendImage(ctx, image, w) }
	receiveVolume := func(r io.Reader) error { return tr.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: volume2}, r) }
	receiveImage := func(r io.Reader) error { return tr.ReceiveImage(ctx, image2, r) }
	if err := through(sendVolume, receiveVolume); err != nil {
		t.Fatalf("ship volume: %v", err)
	}
	if err := through(sendImage, receiveImage); err != nil {
		t.Fatalf("ship image: %v", err)
	}
	if ok, err := h.Node.VolumeExists(ctx, volume2); err != nil || !ok {
		t.Fatalf("received volume exists: %v, %v", ok, err)
	}
	if info, err := h.Node.Image(ctx, image2); err != nil || !info.Complete {
		t.Fatalf("received image: %+v, %v", info, err)
	}
	// What a node holds is never replaced.
	if err := through(sendVolume, receiveVolume); !errors.Is(err, nodeapi.ErrExists) {
		t.Fatalf("receive over a volume: got %v, want ErrExists", err)
	}
	if err := through(sendImage, receiveImage); !errors.Is(err, nodeapi.ErrExists) {
		t.Fatalf("receive over an image: got %v, want ErrExists", err)
	}
	// A broken stream leaves nothing behind.
	broken := unique("broken")
	if err := tr.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: broken}, failing()); err == nil {
		t.Fatal("a volume received from a broken stream")
	}
	if ok, err := h.Node.VolumeExists(ctx, broken); err != nil || ok {
		t.Fatalf("volume of a broken stream exists: %v, %v", ok, err)
	}
	if err := tr.ReceiveImage(ctx, broken, failing()); err == nil {
		t.Fatal("an image received from a broken stream")
	}
	if info, err := h.Node.Image(ctx, broken); err != nil || info.Complete {
		t.Fatalf("image of a broken stream: %+v, %v", info, err)
	}

	// The received pair restores a sandbox as the captured one would.
	id := sandboxid.New()
	err := h.Node.ResumeFrom(ctx, nodeapi.RestoreSpec{
		ID: id, Image: image2, FromVolume: volume2, Limits: h.Limits, DiskMB: h.DiskMB, AccessToken: sb.token,
		NewIdentity: &nodeapi.Identity{AccessToken: token(), Info: map[string]string{"sandbox_id": id}},
		Network:     network.Policy{Offline: true},
	})
	if err != nil {
		t.Fatalf("restore from what was received: %v", err)
	}
	destroyLater(t, h, id)
	checkRestored(ctx, t, h, handle(ctx, t, h, id), "/tmp/shipped.txt", count)
}

// testMetrics: a running sandbox is sampled within a few intervals, with
// sane figures; a range selects the samples inside it (bounds included);
// a range from before the sandbox existed has none, as has a sandbox the
// node never ran; a range that ends before it starts is refused.
func testMetrics(t *testing.T, h Harness) {
	ctx := caseContext(t, h)
	before := time.Now().UTC()
	sb := create(ctx, t, h)
	var got []nodeapi.MetricSample
	deadline := time.Now().Add(3 * nodeapi.MetricsInterval)
	eventually(ctx, t, "a metrics sample", func() bool {
		var err error
		if got, err = h.Node.Metrics(ctx, sb.id, before, time.Now().UTC().Add(time.Second)); err != nil {
			t.Fatalf("metrics: %v", err)
		}
		if len(got) == 0 && time.Now().After(deadline) {
			t.Fatalf("no sample within %s", 3*nodeapi.MetricsInterval)
		}
		return len(got) > 0
	})
	m := got[0]
	if m.Time.Before(before) || m.CPUCount < 1 || m.MemTotal == 0 || m.MemUsed > m.MemTotal || m.DiskTotal == 0 ||
		m.DiskUsed > m.DiskTotal || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Fatalf("sample %+v (sandbox created at %s)", m, before)
	}
	exact, err := h.Node.Metrics(ctx, sb.id, m.Time, m.Time)
	if err != nil || len(exact) != 1 || !exact[0].Time.Equal(m.Time) {
		t.Fatalf("metrics at exactly %s: %+v, %v", m.Time, exact, err)
	}
	if old, err := h.Node.Metrics(ctx, sb.id, before.Add(-2*time.Hour), before.Add(-time.Hour)); err != nil || len(old) != 0 {
		t.Fatalf("metrics before the sandbox existed: %+v, %v", old, err)
	}
	if none, err := h.Node.Metrics(ctx, sandboxid.New(), before, time.Now()); err != nil || len(none) != 0 {
		t.Fatalf("metrics of a sandbox never run: %+v, %v", none, err)
	}
	if _, err := h.Node.Metrics(ctx, sb.id, time.Now(), time.Now().Add(-time.Minute)); err == nil {
		t.Fatal("metrics of a range ending before its start: no error")
	}
}

// testTemplates: a recipe builds on the node, logging its progress, into
// a template the node's Info lists and a sandbox boots from; the same
// recipe builds into the same id; a failing step fails the build; an
// archive past its limit is refused, one discarded cannot be built from;
// a delete removes the template from Info, and a second delete is no
// error.
func testTemplates(t *testing.T, h Harness) {
	tn, ok := h.Node.(nodeapi.Templates)
	if !ok || h.NoTemplates || h.TemplateName == "" {
		t.Skip("the node builds no templates")
	}
	ctx := caseContext(t, h)
	marker := unique("built")
	recipe := []byte("from: " + h.TemplateName + "\nrun:\n  - echo " + marker + " > /marker\n")
	var logs strings.Builder
	built, err := tn.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "conformance", Recipe: recipe}, &logs)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() { _ = tn.DeleteTemplate(context.Background(), built.Spec.ID) })
	if built.Spec.ID == "" || built.Spec.RootfsVolume == "" || logs.Len() == 0 {
		t.Fatalf("built %+v with log %q", built, logs.String())
	}
	again, err := tn.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "conformance", Recipe: recipe}, io.Discard)
	if err != nil || again.Spec.ID != built.Spec.ID {
		t.Fatalf("the same recipe again: %+v, %v; want id %s", again.Spec, err, built.Spec.ID)
	}
	holds := func() bool {
		info, err := h.Node.Info(ctx)
		if err != nil {
			t.Fatalf("info: %v", err)
		}
		return slices.Contains(info.Templates, built.Spec.ID)
	}
	if !holds() {
		t.Fatalf("Info does not list the built template %s", built.Spec.ID)
	}
	id, tok := sandboxid.New(), token()
	spec := createSpec(h, id, tok)
	spec.Template = built.Spec
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: spec}); err != nil {
		t.Fatalf("create from the built template: %v", err)
	}
	destroyLater(t, h, id)
	if h.Real {
		if got := readFile(ctx, t, handle(ctx, t, h, id), "/marker"); got != marker+"\n" {
			t.Fatalf("the built template's /marker reads %q", got)
		}
	}

	failing := []byte("from: " + h.TemplateName + "\nrun:\n  - exit 3 # " + FakeRecipeFails + "\n")
	if _, err := tn.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "conformance-fails", Recipe: failing}, io.Discard); err == nil {
		t.Fatal("a build whose step fails succeeded")
	}
	if _, err := tn.StageTemplateArchive(ctx, strings.NewReader(strings.Repeat("x", 2048)), 1024); err == nil {
		t.Fatal("an archive past its limit was staged")
	}
	// A staged archive no build will consume is discarded: a build that
	// names it then finds none; a second discard is no error, and a
	// handle that is no handle is refused as such.
	handle, err := tn.StageTemplateArchive(ctx, strings.NewReader("not an image"), 1024)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	if err := tn.DiscardTemplateArchive(ctx, handle); err != nil {
		t.Fatalf("discard: %v", err)
	}
	if _, err := tn.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "conformance-discarded", Recipe: []byte("from: upload\n"), Archive: handle}, io.Discard); err == nil {
		t.Fatal("a build of a discarded archive succeeded")
	}
	if err := tn.DiscardTemplateArchive(ctx, handle); err != nil {
		t.Fatalf("a second discard: %v", err)
	}
	if err := tn.DiscardTemplateArchive(ctx, "../state.db"); !errors.Is(err, nodeapi.ErrInvalidName) {
		t.Fatalf("discard of a path: %v, want ErrInvalidName", err)
	}

	if err := h.Node.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := tn.DeleteTemplate(ctx, built.Spec.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if holds() {
		t.Fatalf("Info lists template %s after its delete", built.Spec.ID)
	}
	if err := tn.DeleteTemplate(ctx, built.Spec.ID); err != nil {
		t.Fatalf("a second delete: %v", err)
	}
}
