package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

// splitSecret reads "PROJECT/NAME" as a secret of that project; a bare
// NAME is of the key's project.
func splitSecret(ref string) (project, name string) {
	if p, n, ok := strings.Cut(ref, "/"); ok {
		return p, n
	}
	return "", ref
}

// SetSecret stores a secret under name ("PROJECT/NAME" for another
// project's), replacing any value it had (admin key only); created says
// whether the name is new. The server never returns the value.
func (c *Client) SetSecret(ctx context.Context, name, value string) (secret *apiv1.Secret, created bool, err error) {
	proj, short := splitSecret(name)
	body, err := json.Marshal(apiv1.SetSecretRequest{Name: short, Value: value, Project: proj})
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

// DeleteSecret removes a secret, name as in SetSecret (admin key only). It
// fails with 409 while a live sandbox's credential rules use it.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	proj, short := splitSecret(name)
	var query url.Values
	if proj != "" {
		query = url.Values{"project": {proj}}
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(short), query, nil, nil)
}
