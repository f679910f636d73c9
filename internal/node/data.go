package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/nodeapi"
)

var (
	_ nodeapi.Data    = (*Node)(nil)
	_ nodeapi.Sandbox = sandboxData{}
	_ nodeapi.DirPage = (*DirPage)(nil)
)

// Sandbox returns the data plane of a running sandbox, or an error
// wrapping ErrNoSandbox.
func (n *Node) Sandbox(_ context.Context, id string) (nodeapi.Sandbox, error) {
	if _, err := n.lookup(id); err != nil {
		return nil, err
	}
	return sandboxData{n: n, id: id}, nil
}

// sandboxData is nodeapi.Sandbox in process. It holds the sandbox's id,
// not its handle: every call finds the sandbox again, as a call over RPC
// does on the remote node, so a caller that keeps it across a destroy
// hears ErrNoSandbox rather than reaching a handle the node let go.
type sandboxData struct {
	n  *Node
	id string
}

func (d sandboxData) ID() string { return d.id }

func (d sandboxData) sandbox() (*Sandbox, error) { return d.n.lookup(d.id) }

// session finds a sandbox and one of its sessions.
func (d sandboxData) session(sid string) (*Sandbox, *Session, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, nil, err
	}
	s, err := sb.Session(sid)
	if err != nil {
		return nil, nil, err
	}
	return sb, s, nil
}

func (d sandboxData) Exec(ctx context.Context, spec ExecSpec) (*ExecResult, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Exec(ctx, spec)
}

func (d sandboxData) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, 0, err
	}
	return sb.ReadFile(ctx, path, user)
}

func (d sandboxData) WriteFile(ctx context.Context, path, user string, body io.Reader) error {
	sb, err := d.sandbox()
	if err != nil {
		return err
	}
	return sb.WriteFile(ctx, path, user, body)
}

func (d sandboxData) Stat(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Stat(ctx, path, user)
}

func (d sandboxData) List(ctx context.Context, path, user string, opts ListOptions) (nodeapi.DirPage, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	page, err := sb.ListPage(ctx, path, user, opts)
	if err != nil {
		return nil, err // not a nil *DirPage in a non-nil interface
	}
	return page, nil
}

func (d sandboxData) Remove(ctx context.Context, path, user string) error {
	sb, err := d.sandbox()
	if err != nil {
		return err
	}
	return sb.Remove(ctx, path, user)
}

func (d sandboxData) MakeDir(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.MakeDir(ctx, path, user)
}

func (d sandboxData) Move(ctx context.Context, from, to, user string) (*filesystempb.EntryInfo, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Move(ctx, from, to, user)
}

func (d sandboxData) StartSession(ctx context.Context, spec SessionSpec) (nodeapi.SessionInfo, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nodeapi.SessionInfo{}, err
	}
	s, err := sb.StartSession(ctx, spec)
	if err != nil {
		return nodeapi.SessionInfo{}, err
	}
	return s.info(), nil
}

func (d sandboxData) Session(_ context.Context, sid string) (nodeapi.SessionInfo, error) {
	_, s, err := d.session(sid)
	if err != nil {
		return nodeapi.SessionInfo{}, err
	}
	return s.info(), nil
}

func (d sandboxData) Sessions(context.Context) ([]nodeapi.SessionInfo, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	all := sb.Sessions()
	out := make([]nodeapi.SessionInfo, 0, len(all))
	for _, s := range all {
		out = append(out, s.info())
	}
	return out, nil
}

// Attach follows the session's journal; the session is found once, so an
// attach outlives a suspend and resume of its sandbox as it always did.
func (d sandboxData) Attach(ctx context.Context, sid string, offset int64, dropped func(requested, first int64) error, fn func(Chunk) error) (*End, error) {
	_, s, err := d.session(sid)
	if err != nil {
		return nil, err
	}
	return s.Journal.Follow(ctx, offset, dropped, fn)
}

func (d sandboxData) WriteStdin(ctx context.Context, sid string, data []byte) error {
	sb, s, err := d.session(sid)
	if err != nil {
		return err
	}
	return sb.WriteStdin(ctx, s, data)
}

func (d sandboxData) CloseStdin(ctx context.Context, sid string) error {
	sb, s, err := d.session(sid)
	if err != nil {
		return err
	}
	return sb.CloseStdin(ctx, s)
}

func (d sandboxData) Signal(ctx context.Context, sid string, signal int) error {
	sb, s, err := d.session(sid)
	if err != nil {
		return err
	}
	return sb.Signal(ctx, s, signal)
}

func (d sandboxData) Resize(ctx context.Context, sid string, cols, rows uint32) error {
	sb, s, err := d.session(sid)
	if err != nil {
		return err
	}
	return sb.Resize(ctx, s, cols, rows)
}

func (d sandboxData) DialPort(ctx context.Context, port int) (net.Conn, error) {
	sb, err := d.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.DialPort(ctx, port)
}

// Agent carries requests over the node's channel to the agent with the
// client's own token (AgentConn.RoundTrip), never the sandbox's.
func (d sandboxData) Agent() http.RoundTripper { return agentTransport(d) }

type agentTransport sandboxData

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sb, err := sandboxData(t).sandbox()
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, fmt.Errorf("agent of %s: %w", t.id, err)
	}
	return sb.Agent.RoundTrip(req)
}

// info describes the session as nodeapi does. The journal is read before
// the end time: finish sets the time first, so an ended session always has
// both.
func (s *Session) info() nodeapi.SessionInfo {
	next, first, end := s.Journal.Status()
	info := nodeapi.SessionInfo{
		ID: s.ID, PID: s.PID, Spec: s.Spec, StartedAt: s.StartedAt,
		OutputBytes: next, DroppedBytes: first,
	}
	if end != nil {
		e := *end
		info.End, info.EndedAt = &e, s.EndedAt()
	}
	return info
}
