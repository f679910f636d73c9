package bench

import (
	"context"
	"fmt"
	"time"
)

// sample calls measure Samples times and summarizes the durations it
// returns. measure times only the part that counts, so that its setup and
// teardown (creating or deleting a sandbox) stay out of the figure.
func (r *runner) sample(ctx context.Context, key string, measure func(ctx context.Context, i int) (time.Duration, error)) (*Summary, error) {
	n := r.cfg.Samples
	samples := make([]time.Duration, 0, n)
	r.progress.step(key, 0, n, "")
	for i := range n {
		d, err := measure(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("sample %d of %d: %w", i+1, n, err)
		}
		samples = append(samples, d)
		r.progress.step(key, i+1, n, doneText(i+1, n, samples))
	}
	return Summarize(samples), nil
}

// doneText is the tail of the last progress line of a measurement.
func doneText(done, total int, samples []time.Duration) string {
	if done < total {
		return ""
	}
	return fmt.Sprintf("p50 %.1f ms", Summarize(samples).P50MS)
}

// timed returns how long fn took.
func timed(fn func() error) (time.Duration, error) {
	start := time.Now()
	err := fn()
	return time.Since(start), err
}
