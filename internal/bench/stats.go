package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes the samples of one latency measurement in milliseconds.
// Percentiles use the nearest-rank method: the p-th percentile is a sample
// that was actually observed (the smallest one with at least p% of the
// samples at or below it), never an interpolation. With 20 samples p95 is
// the 19th and p99 the 20th (the maximum).
type Summary struct {
	N     int     `json:"n"`
	MinMS float64 `json:"min_ms"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
}

// Summarize returns the summary of samples, or nil when there are none.
func Summarize(samples []time.Duration) *Summary {
	if len(samples) == 0 {
		return nil
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return &Summary{
		N:     len(sorted),
		MinMS: millis(sorted[0]),
		P50MS: millis(Percentile(sorted, 50)),
		P95MS: millis(Percentile(sorted, 95)),
		P99MS: millis(Percentile(sorted, 99)),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending and not empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// millis converts d to milliseconds rounded to the microsecond: finer
// digits are noise at these timescales and make the JSON harder to read.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
