package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// ListProjects returns every project with its quota and usage (admin key
// only).
func (c *Client) ListProjects(ctx context.Context) ([]apiv1.Project, error) {
	var list apiv1.ProjectList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/projects", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Projects, nil
}

// SetProjectQuota replaces a project's quota settings; nil fields take the
// server's defaults (admin key only).
func (c *Client) SetProjectQuota(ctx context.Context, name string, settings apiv1.QuotaSettings) (*apiv1.Project, error) {
	var p apiv1.Project
	if err := c.doJSON(ctx, http.MethodPut, "/v1/projects/"+url.PathEscape(name), nil, settings, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
