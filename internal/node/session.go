package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/nodeapi"
)

// Session is one command whose lifetime is independent of any client: the
// node follows its output into a journal that clients read by offset.
type Session struct {
	ID        string
	PID       uint32
	Spec      SessionSpec
	StartedAt time.Time
	Journal   *Journal

	mu       sync.Mutex
	endedAt  time.Time
	cancel   context.CancelFunc
	onOutput func()
}

// EndedAt is when the process ended (zero while it runs).
func (s *Session) EndedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endedAt
}

// StartSession starts a command and follows its output until it ends.
func (sb *Sandbox) StartSession(ctx context.Context, spec SessionSpec) (*Session, error) {
	if len(spec.Cmd) == 0 {
		return nil, errors.New("empty command")
	}
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if err := sb.reserveSession(); err != nil {
		return nil, err
	}
	defer sb.unreserveSession()
	req := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: spec.Cmd[0], Args: spec.Cmd[1:], Envs: spec.Env},
		Stdin:   &spec.Stdin,
	}
	if spec.Cwd != "" {
		req.Process.Cwd = &spec.Cwd
	}
	if spec.Tag != "" {
		req.Tag = &spec.Tag
	}
	if spec.TTY {
		cols, rows := spec.Cols, spec.Rows
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: cols, Rows: rows}}
	}
	// The stream outlives the request that started it.
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	creq := connect.NewRequest(req)
	setUser(creq.Header(), spec.User)
	stream, err := sb.Agent.Process.Start(streamCtx, creq)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start %q: %w", spec.Cmd[0], err)
	}
	pid, err := firstPID(stream)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start %q: %w", spec.Cmd[0], err)
	}
	s := sb.addSession(pid, spec, cancel)
	go sb.follow(streamCtx, s, stream)
	return s, nil
}

// sessionID names the session of a process. It is derived from the pid so
// that a restarted node, or a sandbox restored from an image, finds the same
// sessions again through the agent's process list.
func sessionID(pid uint32) string { return "s" + strconv.FormatUint(uint64(pid), 10) }

// defaultMaxSessions bounds the sessions a sandbox keeps (Config.MaxSessions).
// Each holds its command and tag and up to SessionOutputLimit of output in
// the node's memory: 64 of 8 MiB is 512 MiB at most for one sandbox, and a
// listing of all of them is at most 64 times MaxSessionCmdBytes.
const defaultMaxSessions = 64

// reserveSession holds a place for a session about to start, making room
// by forgetting the finished sessions that ended first: a client that
// starts short commands and never looks back is not refused for them, and
// one that wants a finished session's output reads it before starting
// the next few dozen. With every place held by a running session it
// refuses (ErrTooManySessions).
func (sb *Sandbox) reserveSession() error {
	limit := sb.node.cfg.MaxSessions
	if limit <= 0 {
		limit = defaultMaxSessions
	}
	sb.mu.Lock()
	var forgotten []*Session
	for len(sb.sessions)+sb.startingSessions >= limit {
		oldest := sb.oldestFinished()
		if oldest == nil {
			break
		}
		delete(sb.sessions, oldest.ID)
		forgotten = append(forgotten, oldest)
	}
	full := len(sb.sessions)+sb.startingSessions >= limit
	if !full {
		sb.startingSessions++
	}
	sb.mu.Unlock()
	for _, s := range forgotten {
		s.Journal.Close()
	}
	if full {
		return fmt.Errorf("%w: the sandbox runs %d sessions, as many as it may keep; wait for one to end or signal one", ErrTooManySessions, limit)
	}
	return nil
}

// unreserveSession gives back reserveSession's place once the session is
// added, or failed to start.
func (sb *Sandbox) unreserveSession() {
	sb.mu.Lock()
	sb.startingSessions--
	sb.mu.Unlock()
}

// oldestFinished is the session that ended first, nil if none has; sb.mu
// is held.
func (sb *Sandbox) oldestFinished() *Session {
	var oldest *Session
	var oldestEnd time.Time
	for _, s := range sb.sessions {
		if ended := s.EndedAt(); !ended.IsZero() && (oldest == nil || ended.Before(oldestEnd)) {
			oldest, oldestEnd = s, ended
		}
	}
	return oldest
}

func (sb *Sandbox) addSession(pid uint32, spec SessionSpec, cancel context.CancelFunc) *Session {
	// The environment went to the process; kept, it would only be memory
	// the client made the node hold.
	spec.Env = nil
	s := &Session{
		ID:        sessionID(pid),
		PID:       pid,
		Spec:      spec,
		StartedAt: time.Now().UTC(),
		Journal:   sb.newJournal(sessionID(pid)),
		cancel:    cancel,
		onOutput:  func() { sb.node.activity(sb.ID) },
	}
	sb.mu.Lock()
	if old, ok := sb.sessions[s.ID]; ok {
		old.cancel()
		old.Journal.Close()
	}
	sb.sessions[s.ID] = s
	sb.mu.Unlock()
	return s
}

// adoptProcesses creates sessions for processes the agent runs that the node
// does not follow yet (after a node restart or a restore), and follows them
// from the oldest output the agent still holds.
func (sb *Sandbox) adoptProcesses(ctx context.Context) {
	resp, err := sb.Agent.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		sb.node.log.Warn("list processes to adopt", "sandbox", sb.ID, "err", err)
		return
	}
	for _, p := range resp.Msg.GetProcesses() {
		sb.mu.Lock()
		_, known := sb.sessions[sessionID(p.GetPid())]
		sb.mu.Unlock()
		if known {
			continue
		}
		spec := SessionSpec{Cmd: append([]string{p.GetConfig().GetCmd()}, p.GetConfig().GetArgs()...), Tag: p.GetTag()}
		if err := spec.Check(); err != nil {
			// Started through the agent's own API, which the session
			// bounds do not cover: followed, under its program's name.
			spec = SessionSpec{Cmd: []string{truncate(spec.Cmd[0], nodeapi.MaxSessionCmdBytes)}, Tag: truncate(spec.Tag, nodeapi.MaxSessionTag)}
		}
		if err := sb.reserveSession(); err != nil {
			sb.node.log.Warn("not adopting a process", "sandbox", sb.ID, "pid", p.GetPid(), "err", err)
			continue
		}
		streamCtx, cancel := context.WithCancel(context.Background())
		s := sb.addSession(p.GetPid(), spec, cancel)
		sb.unreserveSession()
		go sb.follow(streamCtx, s, nil)
	}
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// dropSessions ends every session and forgets it; their processes are
// gone (a rollback).
func (sb *Sandbox) dropSessions(reason string) {
	sb.closeSessions(reason)
	sb.mu.Lock()
	old := sb.sessions
	sb.sessions = map[string]*Session{}
	sb.mu.Unlock()
	for _, s := range old {
		s.Journal.Close()
	}
}

// discardSessions ends every session and removes their spill files: the
// sandbox is released. Readers still attached read the rest of what
// memory holds.
func (sb *Sandbox) discardSessions(reason string) {
	sb.closeSessions(reason)
	for _, s := range sb.Sessions() {
		s.Journal.Close()
	}
	sb.node.removeSpills(sb.ID)
}

// startStream is what Start and Connect both return.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

type startStream interface {
	eventStream
	Msg() *processpb.StartResponse
}

func firstPID(stream startStream) (uint32, error) {
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("agent closed the stream before the process started")
}

// follow copies the process's events into the journal. When the connection
// to the agent breaks, it reconnects by pid from the last offset it holds,
// so no byte is lost.
func (sb *Sandbox) follow(ctx context.Context, s *Session, first *connect.ServerStreamForClient[processpb.StartResponse]) {
	done := false
	if first != nil {
		done = consume(first, func() *processpb.ProcessEvent { return first.Msg().GetEvent() }, s)
		first.Close()
	}
	for attempt := 0; !done; attempt++ {
		if ctx.Err() != nil {
			s.finish(End{ExitCode: -1, Error: "session closed"})
			return
		}
		if attempt > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)):
			}
		}
		next, _, _ := s.Journal.Status()
		req := connect.NewRequest(&processpb.ConnectRequest{
			Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.PID}},
		})
		req.Header().Set("X-Space-Output-Offset", strconv.FormatInt(next, 10))
		stream, err := sb.Agent.Process.Connect(ctx, req)
		if err != nil {
			if connect.CodeOf(err) == connect.CodeNotFound {
				s.finish(End{ExitCode: -1, Error: "process lost: " + err.Error()})
				return
			}
			continue
		}
		// The agent says where its replay starts; past what we asked for
		// means it no longer holds the bytes in between.
		if from, err := strconv.ParseInt(stream.ResponseHeader().Get("X-Space-Output-Offset"), 10, 64); err == nil {
			s.Journal.Skip(from)
		}
		attempt = 0
		done = consume(stream, func() *processpb.ProcessEvent { return stream.Msg().GetEvent() }, s)
		stream.Close()
	}
}

// consume reads one stream until it ends; it reports whether the process ended.
func consume(stream eventStream, event func() *processpb.ProcessEvent, s *Session) bool {
	for stream.Receive() {
		ev := event()
		if d := ev.GetData(); d != nil {
			if s.onOutput != nil {
				s.onOutput()
			}
			switch {
			case d.GetStdout() != nil:
				s.Journal.Append(Stdout, d.GetStdout())
			case d.GetStderr() != nil:
				s.Journal.Append(Stderr, d.GetStderr())
			case d.GetPty() != nil:
				s.Journal.Append(PTY, d.GetPty())
			}
		}
		if e := ev.GetEnd(); e != nil {
			s.finish(End{ExitCode: int(e.GetExitCode()), Error: e.GetError()})
			return true
		}
	}
	return false
}

func (s *Session) finish(e End) {
	s.mu.Lock()
	if s.endedAt.IsZero() {
		s.endedAt = time.Now().UTC()
	}
	s.mu.Unlock()
	s.Journal.Finish(e)
}

// Session returns one session.
func (sb *Sandbox) Session(id string) (*Session, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	s, ok := sb.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrNoSession)
	}
	return s, nil
}

// Sessions lists the sandbox's sessions, oldest first.
func (sb *Sandbox) Sessions() []*Session {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	out := make([]*Session, 0, len(sb.sessions))
	for _, s := range sb.sessions {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out
}

func (sb *Sandbox) closeSessions(reason string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for _, s := range sb.sessions {
		s.cancel()
		s.finish(End{ExitCode: -1, Error: reason})
	}
}

func selector(s *Session) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.PID}}
}

// WriteStdin sends input to the session's process (its terminal for TTY
// sessions).
func (sb *Sandbox) WriteStdin(ctx context.Context, s *Session, data []byte) error {
	in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: data}}
	if s.Spec.TTY {
		in = &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: data}}
	}
	_, err := sb.Agent.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: selector(s), Input: in}))
	if err != nil {
		return fmt.Errorf("stdin of session %s: %w", s.ID, err)
	}
	return nil
}

// CloseStdin gives the process end-of-file on stdin.
func (sb *Sandbox) CloseStdin(ctx context.Context, s *Session) error {
	if s.Spec.TTY {
		return sb.WriteStdin(ctx, s, []byte{4}) // Ctrl-D
	}
	_, err := sb.Agent.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: selector(s)}))
	if err != nil {
		return fmt.Errorf("close stdin of session %s: %w", s.ID, err)
	}
	return nil
}

// Signal sends a signal (by number) to the session's process group.
func (sb *Sandbox) Signal(ctx context.Context, s *Session, signal int) error {
	_, err := sb.Agent.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: selector(s), Signal: processpb.Signal(signal),
	}))
	if err != nil {
		return fmt.Errorf("signal session %s: %w", s.ID, err)
	}
	return nil
}

// Resize changes the session's terminal size.
func (sb *Sandbox) Resize(ctx context.Context, s *Session, cols, rows uint32) error {
	if !s.Spec.TTY {
		return errors.New("session has no terminal")
	}
	_, err := sb.Agent.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
		Process: selector(s), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: cols, Rows: rows}},
	}))
	if err != nil {
		return fmt.Errorf("resize session %s: %w", s.ID, err)
	}
	return nil
}
