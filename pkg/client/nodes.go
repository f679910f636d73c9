package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// ListNodes returns the cluster's nodes, by id (admin key only).
func (c *Client) ListNodes(ctx context.Context) ([]apiv1.Node, error) {
	var list apiv1.NodeList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/nodes", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Nodes, nil
}

// GetNode returns one node (admin key only).
func (c *Client) GetNode(ctx context.Context, id string) (*apiv1.Node, error) {
	var n apiv1.Node
	if err := c.doJSON(ctx, http.MethodGet, nodePath(id), nil, nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// CordonNode stops placing new sandboxes on a node (admin key only).
func (c *Client) CordonNode(ctx context.Context, id string) (*apiv1.Node, error) {
	return c.nodeAction(ctx, id, "cordon")
}

// UncordonNode makes a cordoned or draining node take new sandboxes again
// (admin key only).
func (c *Client) UncordonNode(ctx context.Context, id string) (*apiv1.Node, error) {
	return c.nodeAction(ctx, id, "uncordon")
}

// DrainNode marks a node draining, which moves its sandboxes to other
// nodes; it returns once the node is draining (admin key only).
func (c *Client) DrainNode(ctx context.Context, id string) (*apiv1.Node, error) {
	return c.nodeAction(ctx, id, "drain")
}

func (c *Client) nodeAction(ctx context.Context, id, action string) (*apiv1.Node, error) {
	var n apiv1.Node
	if err := c.doJSON(ctx, http.MethodPost, nodePath(id)+"/"+action, nil, nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// RemoveNode deletes a node that runs no sandboxes, or a lost one, and
// returns nil. With force, a node with sandboxes is marked lost instead
// (its sandboxes written off) and returned (admin key only).
func (c *Client) RemoveNode(ctx context.Context, id string, force bool) (*apiv1.Node, error) {
	var query url.Values
	if force {
		query = url.Values{"force": {"true"}}
	}
	req, err := c.newRequest(ctx, http.MethodDelete, nodePath(id), query, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil, nil
	}
	var n apiv1.Node
	if err := decodeBody(resp, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

func nodePath(id string) string { return "/v1/nodes/" + url.PathEscape(id) }
