package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// Metrics returns a sandbox's resource samples within [start, end], oldest
// first. The history is kept by the node the sandbox is on (it samples
// every nodeapi.MetricsInterval and keeps nodeapi.MetricsRetention), so
// any replica answers alike; a sandbox moved off another node has only
// the samples its current node took. Nothing from before the sandbox was
// created is returned (a pooled sandbox waited before someone claimed it).
func (cp *ControlPlane) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.MetricSample, error) {
	if end.Before(start) {
		return nil, fmt.Errorf("%w: metrics range ends (%s) before it starts (%s)", ErrInvalid, end.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339))
	}
	r, err := cp.lookup(id)
	if err != nil {
		return nil, err
	}
	s := cp.snapshot(r)
	if start.Before(s.CreatedAt) {
		start = s.CreatedAt
	}
	if end.Before(start) {
		return []nodeapi.MetricSample{}, nil
	}
	n, err := cp.nodeOf(s)
	if err != nil {
		return nil, err
	}
	samples, err := n.Metrics(ctx, id, start, end)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", id, err)
	}
	return samples, nil
}
