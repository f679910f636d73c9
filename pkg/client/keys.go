package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// CreateKey creates an API key (admin key only), of req.Project (default:
// project "default"). The returned APIKey.Key is the secret; the server
// never shows it again.
func (c *Client) CreateKey(ctx context.Context, req apiv1.CreateKeyRequest) (*apiv1.APIKey, error) {
	var key apiv1.APIKey
	if err := c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, req, &key); err != nil {
		return nil, err
	}
	return &key, nil
}

// ListKeys returns all API keys without their secrets (admin key only).
func (c *Client) ListKeys(ctx context.Context) ([]apiv1.APIKey, error) {
	var list apiv1.KeyList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/keys", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Keys, nil
}

// RevokeKey deletes an API key by id (admin key only).
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}
