package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Pool sizes and waits used around the create measurements.
const (
	// pooledSize is the least warm pool create_pooled runs with; it keeps
	// a sandbox ready while the previous sample's is being replaced.
	pooledSize = 4
	// poolReadyTimeout bounds the (untimed) wait for a warm sandbox.
	poolReadyTimeout = 2 * time.Minute
)

// measureCreateUnpooled times POST /v1/sandboxes until running with the
// template's warm pool emptied, so every sample starts a sandbox itself.
func (r *runner) measureCreateUnpooled(ctx context.Context) (*Summary, error) {
	if r.res.Template.PoolAPI {
		restore, err := r.resizePool(ctx, func(int) int { return 0 })
		if err != nil {
			return nil, err
		}
		defer restore()
		if err := r.pool.waitFor(ctx, poolReadyTimeout, "an empty pool",
			func(st apiv1.PoolStatus) bool { return st.Ready == 0 }); err != nil {
			return nil, err
		}
	} else {
		r.res.note(KeyCreateUnpooled, "the server has no warm pool API: every create starts a sandbox")
	}
	if r.cfg.Runtime == runtimeMicroVM {
		// The node boots a microVM image of a size at its first warm
		// create of that size: not what this figure is for.
		if _, err := r.createAndDelete(ctx, 0); err != nil {
			return nil, fmt.Errorf("first create (the image of this size): %w", err)
		}
		r.res.note(KeyCreateUnpooled, "a restore of the template's microVM image of the default size, made by an untimed create first")
	}
	return r.sample(ctx, KeyCreateUnpooled, r.createAndDelete)
}

// measureCreatePooled times the same with a warm pool of at least
// pooledSize, waiting (untimed) before each sample until one is ready, and
// takes its floor from the server: the node's claim of each sample's
// sandbox, as the control plane timed it (space_pool_claim_seconds).
func (r *runner) measureCreatePooled(ctx context.Context) error {
	if !r.res.Template.PoolAPI {
		return absent("the server has no warm pool API (GET /v1/templates/%s has no pool field)", r.cfg.Template)
	}
	if !r.poolServesRuntime() {
		return absent("template %s's pool holds sandboxes of its default runtime %s: bench a template whose default runtime is %s",
			r.cfg.Template, r.res.Template.DefaultRuntime, r.cfg.Runtime)
	}
	floor := &claimFloor{baseURL: r.api.BaseURL(), on: r.wants(KeyFloorCreatePooled)}
	if floor.on {
		_, found, err := readClaims(ctx, floor.baseURL)
		switch {
		case err != nil:
			floor.on, floor.err = false, err
		case !found:
			floor.on = false
			r.record([]string{KeyFloorCreatePooled}, absent("the server's /metrics has no %s (a server older than this bench)", claimMetric))
		}
	}
	restore, err := r.resizePool(ctx, func(size int) int { return max(size, pooledSize) })
	if err != nil {
		return err
	}
	defer restore()
	s, err := r.sample(ctx, KeyCreatePooled, r.whenWarm(func(ctx context.Context, i int) (time.Duration, error) {
		return floor.around(ctx, func() (time.Duration, error) { return r.createAndDelete(ctx, i) })
	}))
	if err != nil {
		return err
	}
	if r.wants(KeyCreatePooled) {
		r.res.setLatency(KeyCreatePooled, s)
	}
	if !floor.on && floor.err == nil {
		return nil // skipped, or absent and noted
	}
	return r.takeFloor(ctx, KeyFloorCreatePooled, func() (*Summary, error) {
		fs, err := floor.summary()
		if err != nil {
			return nil, err
		}
		how := fmt.Sprintf("the node's claim of each sample's pooled sandbox, as the control plane timed it around the node call (%s on GET /metrics, read before and after each sample): the agent's re-key (POST /init over the node's agent channel) and the owner's network policy; without the HTTP API, admission, the store and the client's wait", claimMetric)
		if floor.missed+floor.crowded > 0 {
			how += fmt.Sprintf("; %d samples not counted (%d not served by the pool, %d alongside other claims)", floor.missed+floor.crowded, floor.missed, floor.crowded)
		}
		r.res.note(KeyFloorCreatePooled, how)
		return fs, nil
	})
}

// whenWarm wraps a sample so that it starts only once the pool has a
// ready sandbox; the wait is not part of the sample.
func (r *runner) whenWarm(measure func(ctx context.Context, i int) (time.Duration, error)) func(ctx context.Context, i int) (time.Duration, error) {
	return func(ctx context.Context, i int) (time.Duration, error) {
		if err := r.pool.waitFor(ctx, poolReadyTimeout, "a ready sandbox",
			func(st apiv1.PoolStatus) bool { return st.Ready >= 1 }); err != nil {
			return 0, err
		}
		return measure(ctx, i)
	}
}

// createAndDelete is one create sample: POST to running, then an untimed
// delete.
func (r *runner) createAndDelete(ctx context.Context, _ int) (time.Duration, error) {
	sb, d, err := r.createRunning(ctx, r.request(0, shortLifetimeS))
	if err != nil {
		return 0, err
	}
	return d, r.remove(ctx, sb.ID)
}

// resizePool sets the template's pool size to resize(current) and returns
// a function that puts the old size back, which also works after ctx ended.
func (r *runner) resizePool(ctx context.Context, resize func(current int) int) (restore func(), err error) {
	st, err := r.pool.status(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.pool.setSize(ctx, resize(st.Size)); err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := r.pool.setSize(ctx, st.Size); err != nil {
			r.progress.printf("could not restore the pool size of template %s to %d: %v", r.cfg.Template, st.Size, err)
		}
	}, nil
}

// measureCreateFirstExec times POST /v1/sandboxes, the wait until running
// and a first `echo hi`, up to its result: what a client waits for before
// its first command has run. With a warm pool API it runs like
// create_pooled (a server's normal state once warm); without, every
// sample starts a sandbox.
func (r *runner) measureCreateFirstExec(ctx context.Context) (*Summary, error) {
	measure := r.createFirstExec
	if r.res.Template.PoolAPI && r.poolServesRuntime() {
		restore, err := r.resizePool(ctx, func(size int) int { return max(size, pooledSize) })
		if err != nil {
			return nil, err
		}
		defer restore()
		measure = r.whenWarm(measure)
		r.res.note(KeyCreateFirstExec, fmt.Sprintf("with a warm pool (size >= %d, a ready sandbox waited for untimed before each sample)", pooledSize))
	}
	return r.sample(ctx, KeyCreateFirstExec, measure)
}

// poolServesRuntime says the template's pool holds sandboxes of the run's
// runtime: pools are of a template's default runtime.
func (r *runner) poolServesRuntime() bool {
	def := r.res.Template.DefaultRuntime
	return def == r.cfg.Runtime || def == "" && r.cfg.Runtime == runtimeGVisor
}

func (r *runner) createFirstExec(ctx context.Context, _ int) (time.Duration, error) {
	start := time.Now()
	sb, _, err := r.createRunning(ctx, r.request(0, shortLifetimeS))
	if err != nil {
		return 0, err
	}
	res, err := r.api.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"echo", "hi"}})
	d := time.Since(start)
	if err != nil {
		err = fmt.Errorf("exec in %s: %w", sb.ID, err)
	} else if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi" {
		err = fmt.Errorf("echo hi: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return d, errors.Join(err, r.remove(ctx, sb.ID))
}
