package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// ErrNoPoolAPI is returned (wrapped) when the server predates warm pools.
var ErrNoPoolAPI = errors.New("the server has no warm pool API")

// poolControl reads and sizes one template's warm pool (GET
// /v1/templates/{name} `pool`, PUT /v1/templates/{name}/pool), telling a
// server without pools apart from a failing one.
type poolControl struct {
	api      *client.Client
	template string
}

// status reads the pool; ErrNoPoolAPI when the template record has none.
func (p poolControl) status(ctx context.Context) (apiv1.PoolStatus, error) {
	tpl, err := p.api.GetTemplateLogsFrom(ctx, p.template, skipLogs)
	if err != nil {
		return apiv1.PoolStatus{}, fmt.Errorf("read pool of template %s: %w", p.template, err)
	}
	if tpl.Pool == nil {
		return apiv1.PoolStatus{}, ErrNoPoolAPI
	}
	return *tpl.Pool, nil
}

// setSize asks for size warm sandboxes; a server without the route (404,
// 405) gives ErrNoPoolAPI.
func (p poolControl) setSize(ctx context.Context, size int) error {
	_, err := p.api.SetTemplatePool(ctx, p.template, size)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusMethodNotAllowed) {
		return fmt.Errorf("set pool size of template %s: %w (%v)", p.template, ErrNoPoolAPI, err)
	}
	if err != nil {
		return fmt.Errorf("set pool size of template %s to %d: %w", p.template, size, err)
	}
	return nil
}

// waitFor polls the pool until ok accepts its status or timeout passes.
func (p poolControl) waitFor(ctx context.Context, timeout time.Duration, what string, ok func(apiv1.PoolStatus) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := p.status(ctx)
		if err == nil && ok(st) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("last seen size %d, ready %d", st.Size, st.Ready)
			}
			return fmt.Errorf("pool of template %s: waiting for %s: %w (%v)", p.template, what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
