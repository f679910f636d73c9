package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/dirlist"
)

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
	status := resp.StatusCode
	switch {
	case status == http.StatusUnauthorized:
		// The node sends the right token; the agent refused the user
		// the request named (?user=), which is the client's error.
		status = http.StatusBadRequest
	case status >= 500 && status != http.StatusInsufficientStorage:
		status = http.StatusBadGateway
	}
	return &AgentError{Status: status, Message: body.Message}
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

// DirPage is one page of a listing as it streams from the agent: Next
// returns entries one at a time and nothing is held beyond the current
// line. The caller closes it.
type DirPage struct {
	body io.ReadCloser
	dec  *json.Decoder
	path string
	next string
	done bool
}

// ListPage starts one page of a listing of path. Errors about the request
// (missing path, not a directory, bad cursor) come back here, before any
// entry.
func (sb *Sandbox) ListPage(ctx context.Context, path, user string, opts ListOptions) (*DirPage, error) {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	if opts.Depth > 0 {
		q.Set("depth", strconv.Itoa(opts.Depth))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentBaseURL+"/list?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := sb.Agent.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, agentAgentError(resp)
	}
	return &DirPage{body: resp.Body, dec: json.NewDecoder(resp.Body), path: path}, nil
}

// Next returns the next entry, or io.EOF after the last one. An answer
// that ends early (the agent died, the listing failed midway) is an error,
// never a short page.
func (p *DirPage) Next() (*filesystempb.EntryInfo, error) {
	if p.done {
		return nil, io.EOF
	}
	var line dirlist.Line
	if err := p.dec.Decode(&line); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("list %s: the agent's answer broke off: %w", p.path, err)
	}
	switch {
	case line.Error != "":
		return nil, fmt.Errorf("list %s: %s", p.path, line.Error)
	case line.Done:
		p.done, p.next = true, line.NextCursor
		return nil, io.EOF
	}
	var e filesystempb.EntryInfo
	if err := protojson.Unmarshal(line.Entry, &e); err != nil {
		return nil, fmt.Errorf("list %s: bad entry from the agent: %w", p.path, err)
	}
	return &e, nil
}

// NextCursor is the cursor of the following page ("" when this was the
// last); valid once Next has returned io.EOF.
func (p *DirPage) NextCursor() string { return p.next }

// Close releases the stream.
func (p *DirPage) Close() error { return p.body.Close() }

// Remove deletes a file or a directory tree. A missing path is 404: the
// agent's Remove, like envd's, succeeds on one, but an API client that
// deletes a path it mistyped should hear about it.
func (sb *Sandbox) Remove(ctx context.Context, path, user string) error {
	if _, err := sb.Stat(ctx, path, user); err != nil {
		return err
	}
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
		case connect.CodeUnauthenticated:
			// The node sends the right token; what the agent refused is
			// the user the request named (?user=).
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
