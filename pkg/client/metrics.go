package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Metrics reads a sandbox's resource samples taken within [start, end];
// a zero start is the sandbox's creation, a zero end now.
func (c *Client) Metrics(ctx context.Context, id string, start, end time.Time) (*apiv1.MetricsList, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.UTC().Format(time.RFC3339Nano))
	}
	if !end.IsZero() {
		q.Set("end", end.UTC().Format(time.RFC3339Nano))
	}
	var out apiv1.MetricsList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "metrics"), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
