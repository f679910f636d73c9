package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// SetSecret stores a secret under name, replacing any value it had (admin
// key only); created says whether the name is new. The server never
// returns the value.
func (c *Client) SetSecret(ctx context.Context, name, value string) (secret *apiv1.Secret, created bool, err error) {
	body, err := json.Marshal(apiv1.SetSecretRequest{Name: name, Value: value})
	if err != nil {
		return nil, false, fmt.Errorf("encode secret %s: %w", name, err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/secrets", nil, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	var s apiv1.Secret
	if err := decodeBody(resp, &s); err != nil {
		return nil, false, err
	}
	return &s, resp.StatusCode == http.StatusCreated, nil
}

// ListSecrets returns the stored secrets' names and times (admin key only).
func (c *Client) ListSecrets(ctx context.Context) ([]apiv1.Secret, error) {
	var list apiv1.SecretList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/secrets", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Secrets, nil
}

// DeleteSecret removes a secret (admin key only). It fails with 409 while a
// live sandbox's credential rules use it.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, nil)
}
