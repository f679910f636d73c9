package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
)

// AgentError is a failed call to a sandbox's agent, with the HTTP status
// that describes it to API clients (404 missing, 400 bad path, 507 out of
// space, 502 agent unreachable, ...).
type AgentError struct {
	Status  int
	Message string
}

func (e *AgentError) Error() string { return e.Message }

func filesURL(path, user string) string {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return agentBaseURL + "/files?" + q.Encode()
}

// ReadFile opens a file in the sandbox for reading; the caller closes it.
func (sb *Sandbox) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesURL(path, user), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := sb.Agent.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, 0, agentAgentError(resp)
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteFile streams body into a file, creating parents. The agent syncs the
// file and its directory before answering, so a nil error means durable.
func (sb *Sandbox) WriteFile(ctx context.Context, path, user string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, filesURL(path, user), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := sb.Agent.Do(req)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agentAgentError(resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

func agentAgentError(resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) != nil || body.Message == "" {
		body.Message = fmt.Sprintf("agent answered %s", resp.Status)
	}
	return &AgentError{Status: resp.StatusCode, Message: body.Message}
}

func fsRequest[T any](msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	setUser(r.Header(), user)
	return r
}

// Stat describes one path.
func (sb *Sandbox) Stat(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error) {
	resp, err := sb.Agent.FS.Stat(ctx, fsRequest(&filesystempb.StatRequest{Path: path}, user))
	if err != nil {
		return nil, fileErr("stat", path, err)
	}
	return resp.Msg.GetEntry(), nil
}

// ListDir lists a directory to the given depth (1 = direct children).
func (sb *Sandbox) ListDir(ctx context.Context, path, user string, depth uint32) ([]*filesystempb.EntryInfo, error) {
	resp, err := sb.Agent.FS.ListDir(ctx, fsRequest(&filesystempb.ListDirRequest{Path: path, Depth: depth}, user))
	if err != nil {
		return nil, fileErr("list", path, err)
	}
	return resp.Msg.GetEntries(), nil
}

// Remove deletes a file or a directory tree.
func (sb *Sandbox) Remove(ctx context.Context, path, user string) error {
	_, err := sb.Agent.FS.Remove(ctx, fsRequest(&filesystempb.RemoveRequest{Path: path}, user))
	return fileErr("remove", path, err)
}

// MakeDir creates a directory and its parents.
func (sb *Sandbox) MakeDir(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error) {
	resp, err := sb.Agent.FS.MakeDir(ctx, fsRequest(&filesystempb.MakeDirRequest{Path: path}, user))
	if err != nil {
		return nil, fileErr("mkdir", path, err)
	}
	return resp.Msg.GetEntry(), nil
}

// Move renames a file or directory.
func (sb *Sandbox) Move(ctx context.Context, from, to, user string) (*filesystempb.EntryInfo, error) {
	resp, err := sb.Agent.FS.Move(ctx, fsRequest(&filesystempb.MoveRequest{Source: from, Destination: to}, user))
	if err != nil {
		return nil, fileErr("move", from, err)
	}
	return resp.Msg.GetEntry(), nil
}

// fileErr turns a Connect error into a AgentError with a matching status.
func fileErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	status := http.StatusBadGateway
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeNotFound:
			status = http.StatusNotFound
		case connect.CodeAlreadyExists:
			status = http.StatusConflict
		case connect.CodeInvalidArgument:
			status = http.StatusBadRequest
		case connect.CodePermissionDenied:
			status = http.StatusForbidden
		case connect.CodeResourceExhausted:
			status = http.StatusInsufficientStorage
		case connect.CodeFailedPrecondition:
			status = http.StatusConflict
		}
		return &AgentError{Status: status, Message: fmt.Sprintf("%s %s: %s", op, path, ce.Message())}
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

// OpenInVolume opens an absolute path, as the sandbox saw it, inside a
// captured (read-only) volume, such as a snapshot's filesystem. The lookup
// cannot leave the volume, whatever symlinks it holds.
func (n *Node) OpenInVolume(volume, p string) (*os.File, fs.FileInfo, error) {
	if !path.IsAbs(p) {
		return nil, nil, &AgentError{Status: http.StatusBadRequest, Message: "paths in a snapshot must be absolute: " + p}
	}
	if !n.cfg.Volumes.Exists(volume) {
		return nil, nil, &AgentError{Status: http.StatusNotFound, Message: "snapshot filesystem is gone"}
	}
	root, err := os.OpenRoot(n.cfg.Volumes.Path(volume))
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot volume: %w", err)
	}
	defer root.Close()
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	f, err := root.Open(rel)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, fs.ErrNotExist) {
			status = http.StatusNotFound
		}
		return nil, nil, &AgentError{Status: status, Message: fmt.Sprintf("%s in snapshot: %v", p, err)}
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}
