package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// refusalBackoff is how long a throughput worker waits after the node
// declined a sandbox for lack of room before asking again.
const refusalBackoff = 200 * time.Millisecond

// measureThroughput runs, for each concurrency level c, c workers that each
// loop create → running → delete for a fixed window, and reports the creates
// that reached running inside the window per second of window. A fixed
// window (rather than a fixed count) keeps the run's length independent of
// how fast the server is; sandboxes still starting when it ends are deleted
// and not counted.
func (r *runner) measureThroughput(ctx context.Context) error {
	r.res.Throughput = map[string]float64{}
	for _, c := range r.cfg.Concurrency {
		rate, err := r.throughputAt(ctx, c)
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		r.res.Throughput[strconv.Itoa(c)] = rate
	}
	r.res.note(KeyThroughput, fmt.Sprintf("creates that reached running per second, over a %s window per concurrency level; memory_mb %d; each worker deletes its sandbox before the next create",
		r.cfg.ThroughputWindow, smallSandboxMB))
	return nil
}

// throughputCounts are what the workers of one level observed.
type throughputCounts struct {
	completed atomic.Int64
	refusals  atomic.Int64
	mu        sync.Mutex
	errors    int
	firstErr  error
}

func (t *throughputCounts) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errors++
	if t.firstErr == nil {
		t.firstErr = err
	}
}

func (r *runner) throughputAt(ctx context.Context, concurrency int) (float64, error) {
	key := fmt.Sprintf("throughput c=%d", concurrency)
	window := r.cfg.ThroughputWindow
	deadline := time.Now().Add(window)
	var counts throughputCounts
	r.progress.printf("%s: %s window", key, window)

	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() { r.throughputWorker(ctx, deadline, &counts) })
	}
	stopTicker := make(chan struct{})
	go func() {
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		for {
			select {
			case <-stopTicker:
				return
			case <-tick.C:
				r.progress.printf("%s: %d running so far", key, counts.completed.Load())
			}
		}
	}()
	wg.Wait()
	close(stopTicker)
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	completed := counts.completed.Load()
	rate := math.Round(float64(completed)/window.Seconds()*100) / 100
	r.progress.printf("%s: %d creates in %s = %.2f/s (%d refusals, %d errors)",
		key, completed, window, rate, counts.refusals.Load(), counts.errors)
	if counts.errors > 0 {
		if completed == 0 {
			return 0, counts.firstErr
		}
		r.res.note(KeyThroughput, fmt.Sprintf("c=%d: %d creates failed (first: %v)", concurrency, counts.errors, counts.firstErr))
	}
	if n := counts.refusals.Load(); n > 0 {
		r.res.note(KeyThroughput, fmt.Sprintf("c=%d: the node refused %d creates (full) and they were retried", concurrency, n))
	}
	return rate, nil
}

// throughputWorker creates, waits and deletes sandboxes until deadline.
func (r *runner) throughputWorker(ctx context.Context, deadline time.Time, counts *throughputCounts) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sb, err := r.create(ctx, r.request(smallSandboxMB, shortLifetimeS))
		if isRefusal(err) {
			counts.refusals.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(refusalBackoff):
			}
			continue
		}
		if err != nil {
			counts.fail(err)
			// Back off so that a broken server is not hammered.
			select {
			case <-ctx.Done():
			case <-time.After(refusalBackoff):
			}
			continue
		}
		_, err = r.settle(ctx, sb, apiv1.StateRunning)
		if err == nil && time.Now().Before(deadline) {
			counts.completed.Add(1)
		}
		if err != nil {
			counts.fail(err)
		}
		if err := r.remove(context.WithoutCancel(ctx), sb.ID); err != nil {
			counts.fail(err)
		}
	}
}
