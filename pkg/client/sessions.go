package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// CreateSession starts a command in the sandbox. Its output is kept by the
// server and read with Attach; set req.Stdin to feed it with WriteStdin.
func (c *Client) CreateSession(ctx context.Context, id string, req apiv1.CreateSessionRequest) (*apiv1.Session, error) {
	var s apiv1.Session
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "sessions"), nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions returns the sandbox's sessions, running and exited, oldest
// first, reading every page.
func (c *Client) ListSessions(ctx context.Context, id string) ([]apiv1.Session, error) {
	var all []apiv1.Session
	cursor := ""
	for {
		page, err := c.ListSessionsPage(ctx, id, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Sessions...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// ListSessionsPage returns one page of the sandbox's sessions: the first
// with cursor "", the next with the page's NextCursor.
func (c *Client) ListSessionsPage(ctx context.Context, id, cursor string) (*apiv1.SessionList, error) {
	var q url.Values
	if cursor != "" {
		q = url.Values{"cursor": {cursor}}
	}
	var list apiv1.SessionList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "sessions"), q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// GetSession returns one session.
func (c *Client) GetSession(ctx context.Context, id, sid string) (*apiv1.Session, error) {
	var s apiv1.Session
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "sessions", sid), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WriteStdin sends the bytes of data to the session's stdin; with
// closeStdin the server closes stdin afterwards (data may then be nil).
func (c *Client) WriteStdin(ctx context.Context, id, sid string, data io.Reader, closeStdin bool) error {
	var query url.Values
	if closeStdin {
		query = url.Values{"close": {"true"}}
	}
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "sessions", sid, "stdin"), query, data)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBody(resp, nil)
}

// Signal sends a signal to the session's process: "SIGINT", "INT" or a
// number such as "9".
func (c *Client) Signal(ctx context.Context, id, sid, signal string) error {
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "sessions", sid, "signal"), nil, apiv1.SignalRequest{Signal: signal}, nil)
}

// Resize changes the terminal size of a TTY session.
func (c *Client) Resize(ctx context.Context, id, sid string, cols, rows uint32) error {
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "sessions", sid, "resize"), nil, apiv1.ResizeRequest{Cols: cols, Rows: rows}, nil)
}
