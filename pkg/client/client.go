// Package client is a typed Go client for the space API v1.
//
// Every method maps to one HTTP route of the server and takes a
// context.Context that bounds the whole request, including streaming bodies.
// Non-2xx responses are returned as *APIError.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultURL is the server address used when SPACE_URL is not set.
const DefaultURL = "http://127.0.0.1:7070"

// DefaultDataDir is where the server keeps admin.key when SPACE_DATA_DIR is
// not set.
const DefaultDataDir = "/var/lib/space"

// Client talks to one space server. It is safe for concurrent use.
type Client struct {
	baseURL    string
	apiKey     string
	httpClient *http.Client
	userAgent  string
	reconnect  reconnectPolicy
}

// reconnectPolicy bounds how streaming calls (Attach, TemplateLogs) retry a
// dropped connection.
type reconnectPolicy struct {
	minBackoff time.Duration
	maxBackoff time.Duration
	// maxAttempts is the number of consecutive reconnects that deliver no
	// event before the stream gives up; progress resets the count.
	maxAttempts int
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client. It should not set a Timeout:
// streaming calls last as long as their context.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.httpClient = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithReconnect tunes the automatic reconnection of streams: the backoff
// grows from minBackoff to maxBackoff, and the stream fails after
// maxAttempts consecutive reconnects without receiving an event.
func WithReconnect(minBackoff, maxBackoff time.Duration, maxAttempts int) Option {
	return func(c *Client) {
		c.reconnect = reconnectPolicy{minBackoff: minBackoff, maxBackoff: maxBackoff, maxAttempts: maxAttempts}
	}
}

// New returns a client for the server at baseURL (for example
// "http://127.0.0.1:7070") authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL: strings.TrimRight(baseURL, "/"),
		apiKey:  apiKey,
		// No Timeout: it would cut attach and log streams; contexts bound calls.
		httpClient: &http.Client{},
		userAgent:  "space-go-client/v1",
		reconnect:  reconnectPolicy{minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second, maxAttempts: 10},
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// FromEnv builds a client from the environment: SPACE_URL (default
// DefaultURL) and SPACE_API_KEY, falling back to the admin key the server
// writes to $SPACE_DATA_DIR/admin.key (default /var/lib/space/admin.key).
func FromEnv(opts ...Option) (*Client, error) {
	baseURL := os.Getenv("SPACE_URL")
	if baseURL == "" {
		baseURL = DefaultURL
	}
	key := strings.TrimSpace(os.Getenv("SPACE_API_KEY"))
	if key == "" {
		dataDir := os.Getenv("SPACE_DATA_DIR")
		if dataDir == "" {
			dataDir = DefaultDataDir
		}
		keyPath := filepath.Join(dataDir, "admin.key")
		raw, err := os.ReadFile(keyPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no API key: SPACE_API_KEY is not set and %s cannot be read: %w", keyPath, err)
		}
		key = strings.TrimSpace(string(raw))
		if key == "" {
			return nil, fmt.Errorf("no API key: set SPACE_API_KEY or make %s readable", keyPath)
		}
	}
	return New(baseURL, key, opts...), nil
}

// BaseURL returns the server address the client talks to.
func (c *Client) BaseURL() string { return c.baseURL }

// newRequest builds an authenticated request for path (which starts with
// "/") and query.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := c.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s request: %w", method, path, err)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// send performs req and turns a non-2xx status into an *APIError (closing
// the body). On success the caller owns resp.Body.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeAPIError(resp)
	}
	return resp, nil
}

// doJSON sends in (JSON-encoded unless nil) and decodes the response body
// into out (unless nil).
func (c *Client) doJSON(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		encoded, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s body: %w", method, path, err)
		}
		body = bytes.NewReader(encoded)
	}
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBody(resp, out)
}

// decodeBody decodes a JSON response into out, or drains it when out is nil
// so the connection can be reused.
func decodeBody(resp *http.Response, out any) error {
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s response: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}

// sandboxPath returns /v1/sandboxes/{id} followed by the escaped extra segments.
func sandboxPath(id string, segments ...string) string {
	var b strings.Builder
	b.WriteString("/v1/sandboxes/")
	b.WriteString(url.PathEscape(id))
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
