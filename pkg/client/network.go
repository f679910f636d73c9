package client

import (
	"context"
	"net/http"

	"github.com/space-platform/space/pkg/apiv1"
)

// SetNetwork replaces a sandbox's egress policy; new connections follow it
// at once.
func (c *Client) SetNetwork(ctx context.Context, id string, policy apiv1.NetworkPolicy) (*apiv1.Sandbox, error) {
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodPut, sandboxPath(id, "network"), nil, policy, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}
