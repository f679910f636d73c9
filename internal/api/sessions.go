package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// sessionTarget resolves {id} and {sid} of a session route. The session
// is looked up before anything is written, so an unknown one is a 404
// even on the streaming attach route.
func (s *Server) sessionTarget(w http.ResponseWriter, r *http.Request) (nodeapi.Sandbox, nodeapi.SessionInfo, bool) {
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return nil, nodeapi.SessionInfo{}, false
	}
	sess, err := sb.Session(r.Context(), r.PathValue("sid"))
	if err != nil {
		s.fail(w, err)
		return nil, nodeapi.SessionInfo{}, false
	}
	return sb, sess, true
}

func sessionView(sess nodeapi.SessionInfo) apiv1.Session {
	v := apiv1.Session{
		ID: sess.ID, PID: sess.PID, Cmd: sess.Spec.Cmd, Tag: sess.Spec.Tag, TTY: sess.Spec.TTY,
		State: apiv1.SessionRunning, StartedAt: sess.StartedAt, OutputBytes: sess.OutputBytes, DroppedBytes: sess.DroppedBytes,
	}
	if end := sess.End; end != nil {
		code := end.ExitCode
		ended := sess.EndedAt
		v.State, v.ExitCode, v.Error, v.EndedAt = apiv1.SessionExited, &code, end.Error, &ended
	}
	return v
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSessionRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if !checkCommand(w, req.Cmd, req.Env, req.Cwd, req.User) {
		return
	}
	spec := nodeapi.SessionSpec{
		Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, User: req.User, TTY: req.TTY,
		Cols: req.Cols, Rows: req.Rows, Stdin: req.Stdin, Tag: req.Tag,
	}
	if err := spec.Check(); err != nil {
		s.fail(w, err)
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	sess, err := sb.StartSession(r.Context(), spec)
	if errors.Is(err, nodeapi.ErrTooManySessions) {
		s.fail(w, err)
		return
	}
	if err != nil {
		// The command could not start as asked (its program, cwd or
		// user): the agent's answer says which.
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.sessions.Inc()
	writeJSON(w, http.StatusCreated, sessionView(sess))
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultSessionPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSessionPage {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be between 1 and %d", maxSessionPage))
			return
		}
		limit = n
	}
	after, err := parseSessionCursor(q.Get("cursor"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	all, err := sb.Sessions(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionPage(all, after, limit))
}

// A session listing is paged: a sandbox keeps a bounded number of
// sessions, each with a bounded command and tag, but an operator may
// raise the number, and no answer should be tens of MB.
const (
	defaultSessionPage = 100
	maxSessionPage     = 1000
	// sessionPageBytes ends a page early once its sessions' commands and
	// tags add up to this much (a page holds at least one session).
	sessionPageBytes = 1 << 20
)

// sessionCursor is where a page of sessions ends: sessions are listed
// oldest first, by start time then id, so a cursor stays valid when
// sessions before or after it are forgotten.
type sessionCursor struct {
	started int64 // UnixNano
	id      string
}

func (c sessionCursor) before(sess nodeapi.SessionInfo) bool {
	started := sess.StartedAt.UnixNano()
	return c.started < started || c.started == started && c.id < sess.ID
}

func (c sessionCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.started, 10) + "." + c.id))
}

// parseSessionCursor parses a next_cursor; "" is the first page (nil).
func parseSessionCursor(v string) (*sessionCursor, error) {
	if v == "" {
		return nil, nil
	}
	bad := errors.New("cursor is not a next_cursor of this listing")
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, bad
	}
	started, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(started, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, bad
	}
	return &sessionCursor{started: n, id: id}, nil
}

// sessionPage is the page of all after the cursor (nil: from the start):
// at most limit sessions and about sessionPageBytes of commands and tags.
func sessionPage(all []nodeapi.SessionInfo, after *sessionCursor, limit int) apiv1.SessionList {
	sort.Slice(all, func(i, j int) bool {
		return sessionCursor{all[i].StartedAt.UnixNano(), all[i].ID}.before(all[j])
	})
	out := apiv1.SessionList{Sessions: []apiv1.Session{}}
	size := 0
	for i, sess := range all {
		if after != nil && !after.before(sess) {
			continue
		}
		if len(out.Sessions) == limit || len(out.Sessions) > 0 && size >= sessionPageBytes {
			last := all[i-1]
			out.NextCursor = sessionCursor{last.StartedAt.UnixNano(), last.ID}.String()
			break
		}
		out.Sessions = append(out.Sessions, sessionView(sess))
		size += len(sess.Spec.Tag)
		for _, a := range sess.Spec.Cmd {
			size += len(a)
		}
	}
	return out
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	if _, sess, ok := s.sessionTarget(w, r); ok {
		writeJSON(w, http.StatusOK, sessionView(sess))
	}
}

// keepaliveInterval keeps proxies from closing an idle attach stream.
const keepaliveInterval = 15 * time.Second

// attachSession streams the session's output as server-sent events, or as
// binary frames to a client that accepts apiv1.OutputFramesMediaType. Each
// event's id (frame's offset) is the output offset after it, so a client
// that reconnects with Last-Event-ID (or ?from=) gets exactly the bytes it
// missed.
func (s *Server) attachSession(w http.ResponseWriter, r *http.Request) {
	sb, sess, ok := s.sessionTarget(w, r)
	if !ok {
		return
	}
	from := int64(0)
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "the resume offset (Last-Event-ID or from) must be a non-negative integer")
			return
		}
		from = n
	}
	out := newAttachWriter(w, r.Header.Get("Accept"))
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", out.contentType())
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()

	ctx := r.Context()
	stopKeepalive := make(chan struct{})
	keepaliveDone := make(chan struct{})
	// The keepalive writer must be gone before the handler returns: the
	// server finishes the response then, and a write after it races.
	defer func() { close(stopKeepalive); <-keepaliveDone }()
	var writeMu = make(chan struct{}, 1)
	writeMu <- struct{}{}
	next := from // past the last event sent
	write := func(f func()) {
		<-writeMu
		f()
		flush()
		writeMu <- struct{}{}
	}
	go func() {
		defer close(keepaliveDone)
		t := time.NewTicker(keepaliveInterval)
		defer t.Stop()
		for {
			select {
			case <-stopKeepalive:
				return
			case <-t.C:
				write(func() { out.keepalive(next) })
			}
		}
	}()

	end, err := sb.Attach(ctx, sess.ID, from,
		func(requested, first int64) error {
			write(func() {
				next = first
				out.event(apiv1.EventTruncated, first, apiv1.TruncatedEvent{Requested: requested, From: first})
			})
			return nil
		},
		func(c nodeapi.Chunk) error {
			write(func() {
				next = c.Offset + int64(len(c.Data))
				out.output(c.Stream.String(), next, c.Data)
			})
			return nil
		})
	if err != nil {
		// The client went away, or the node did (the sandbox stopped
		// under the attach, a remote node's stream broke): the client
		// reconnects from the last id it saw.
		return
	}
	// The exit event's id is where the journal ends, which is past the
	// last chunk when the agent lost output just before the exit.
	final, ferr := sb.Session(ctx, sess.ID)
	write(func() {
		if ferr == nil {
			next = max(next, final.OutputBytes)
		}
		out.event(apiv1.EventExit, next, apiv1.ExitEvent{ExitCode: end.ExitCode, Error: end.Error})
	})
}

// attachWriter writes an attach stream in the encoding the client asked
// for: server-sent events by default, binary frames
// (apiv1.OutputFramesMediaType) for a client that accepts them.
type attachWriter interface {
	contentType() string
	output(stream string, next int64, data []byte)
	event(name string, next int64, data any)
	keepalive(next int64)
}

func newAttachWriter(w io.Writer, accept string) attachWriter {
	for _, part := range strings.Split(accept, ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == apiv1.OutputFramesMediaType {
			return frameWriter{w}
		}
	}
	return sseWriter{w}
}

type sseWriter struct{ w io.Writer }

func (sseWriter) contentType() string { return "text/event-stream" }

func (s sseWriter) output(stream string, next int64, data []byte) {
	var chunk apiv1.OutputChunk
	if utf8.Valid(data) {
		chunk.Text = string(data)
	} else {
		chunk.Base64 = base64.StdEncoding.EncodeToString(data)
	}
	writeEvent(s.w, stream, next, chunk)
}

func (s sseWriter) event(name string, next int64, data any) { writeEvent(s.w, name, next, data) }

func (s sseWriter) keepalive(int64) { _, _ = io.WriteString(s.w, ": keepalive\n\n") }

type frameWriter struct{ w io.Writer }

func (frameWriter) contentType() string { return apiv1.OutputFramesMediaType }

// frameKinds maps the journal's stream names to frame kinds.
var frameKinds = map[string]byte{
	apiv1.EventStdout: apiv1.FrameStdout, apiv1.EventStderr: apiv1.FrameStderr, apiv1.EventPTY: apiv1.FramePTY,
	apiv1.EventTruncated: apiv1.FrameTruncated, apiv1.EventExit: apiv1.FrameExit,
}

func (f frameWriter) output(stream string, next int64, data []byte) {
	_ = apiv1.WriteFrame(f.w, frameKinds[stream], next, data)
}

func (f frameWriter) event(name string, next int64, data any) {
	b, _ := json.Marshal(data)
	_ = apiv1.WriteFrame(f.w, frameKinds[name], next, b)
}

func (f frameWriter) keepalive(next int64) {
	_ = apiv1.WriteFrame(f.w, apiv1.FrameKeepalive, next, nil)
}

func writeEvent(w io.Writer, event string, id int64, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", event, id, b)
}

func (s *Server) sessionStdin(w http.ResponseWriter, r *http.Request) {
	sb, sess, ok := s.sessionTarget(w, r)
	if !ok {
		return
	}
	closeStdin := false
	if v := r.URL.Query().Get("close"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("close must be true or false, got %q", v))
			return
		}
		closeStdin = b
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxJSONBody))
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(data) > 0 {
		if err := sb.WriteStdin(r.Context(), sess.ID, data); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
	}
	if closeStdin {
		if err := sb.CloseStdin(r.Context(), sess.ID); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// signalNumber accepts "SIGTERM", "TERM", "term" or "15".
func signalNumber(name string) (int, bool) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, n > 0 && n < 65
	}
	name = strings.ToUpper(strings.TrimPrefix(strings.ToUpper(name), "SIG"))
	signals := map[string]syscall.Signal{
		"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
		"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "STOP": syscall.SIGSTOP,
		"CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH, "ALRM": syscall.SIGALRM, "PIPE": syscall.SIGPIPE,
	}
	sig, ok := signals[name]
	return int(sig), ok
}

func (s *Server) sessionSignal(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SignalRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	sig, ok := signalNumber(req.Signal)
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown signal %q", req.Signal))
		return
	}
	sb, sess, ok := s.sessionTarget(w, r)
	if !ok {
		return
	}
	if err := sb.Signal(r.Context(), sess.ID, sig); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) sessionResize(w http.ResponseWriter, r *http.Request) {
	var req apiv1.ResizeRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.Cols == 0 || req.Rows == 0 || req.Cols > 10000 || req.Rows > 10000 {
		writeError(w, http.StatusBadRequest, "cols and rows must be between 1 and 10000")
		return
	}
	sb, sess, ok := s.sessionTarget(w, r)
	if !ok {
		return
	}
	if err := sb.Resize(r.Context(), sess.ID, req.Cols, req.Rows); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req apiv1.ExecRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if !checkCommand(w, req.Cmd, req.Env, req.Cwd, req.User) {
		return
	}
	if req.TimeoutS < 0 {
		writeError(w, http.StatusBadRequest, "timeout_s must not be negative")
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	timeout := 60 * time.Second
	if req.TimeoutS > 0 {
		timeout = time.Duration(req.TimeoutS) * time.Second
	}
	res, err := sb.Exec(r.Context(), nodeapi.ExecSpec{Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, User: req.User, Timeout: timeout})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.ExecResult{Stdout: string(res.Stdout), Stderr: string(res.Stderr), ExitCode: res.ExitCode, OutputTruncated: res.Truncated})
}

// checkCommand rejects, before the sandbox is asked, a command that execve
// could not run as given: an empty program, NUL bytes (which would cut an
// argument short), or env that CheckEnv refuses.
func checkCommand(w http.ResponseWriter, cmd []string, env map[string]string, cwd, user string) bool {
	if len(cmd) == 0 || cmd[0] == "" {
		writeError(w, http.StatusBadRequest, "cmd must name a program: [\"program\", \"arg\", ...]")
		return false
	}
	for i, a := range cmd {
		if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cmd[%d] must be UTF-8 without NUL bytes", i))
			return false
		}
	}
	if strings.ContainsRune(cwd, 0) || strings.ContainsRune(user, 0) {
		writeError(w, http.StatusBadRequest, "cwd and user must not contain NUL bytes")
		return false
	}
	if err := controlplane.CheckEnv(env); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}
