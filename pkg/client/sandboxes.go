package client

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// CreateSandbox asks for a new sandbox. It returns as soon as the server has
// accepted it (state "starting"); use WaitSandbox to wait for "running".
func (c *Client) CreateSandbox(ctx context.Context, req apiv1.CreateSandboxRequest) (*apiv1.Sandbox, error) {
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filters ListSandboxes. Zero values do not filter.
type ListOptions struct {
	State string
	// Metadata keeps sandboxes whose metadata has all these key/value pairs.
	Metadata map[string]string
}

// ListSandboxes returns the sandboxes visible to the API key.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]apiv1.Sandbox, error) {
	query := url.Values{}
	if opts.State != "" {
		query.Set("state", opts.State)
	}
	keys := make([]string, 0, len(opts.Metadata))
	for k := range opts.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys) // stable URLs are easier to read in server logs
	for _, k := range keys {
		query.Set("metadata."+k, opts.Metadata[k])
	}
	var list apiv1.SandboxList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", query, nil, &list); err != nil {
		return nil, err
	}
	return list.Sandboxes, nil
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*apiv1.Sandbox, error) {
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// WaitSandbox blocks until the sandbox reaches state (for example
// apiv1.StateRunning). It fails with a 409 *APIError if the sandbox ended in
// another terminal state (the message carries the reason) and with a 408
// *APIError (see IsTimeout) when timeout elapses first. A timeout of zero
// leaves the choice to the server.
func (c *Client) WaitSandbox(ctx context.Context, id, state string, timeout time.Duration) (*apiv1.Sandbox, error) {
	query := url.Values{"state": {state}}
	if timeout > 0 {
		// Round up so that a sub-second timeout still waits at all.
		query.Set("timeout_s", strconv.Itoa(int(math.Ceil(timeout.Seconds()))))
	}
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "wait"), query, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// DeleteSandbox stops the sandbox and returns once its resources are released.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(id), nil, nil, nil)
}

// SetTimeout sets the sandbox's remaining lifetime to timeout from now.
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) (*apiv1.Sandbox, error) {
	req := apiv1.SetTimeoutRequest{TimeoutS: int(math.Ceil(timeout.Seconds()))}
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "timeout"), nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Exec runs a command to completion and returns its buffered output. Use
// CreateSession and Attach for long-running or interactive commands.
func (c *Client) Exec(ctx context.Context, id string, req apiv1.ExecRequest) (*apiv1.ExecResult, error) {
	var res apiv1.ExecResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
