package bench

import (
	"math/rand/v2"
	"testing"
	"time"
)

func msList(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	one := msList(7)
	twenty := msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"single sample is every percentile", one, 50, 7 * time.Millisecond},
		{"single sample p99", one, 99, 7 * time.Millisecond},
		{"p50 of 20 is the 10th", twenty, 50, 10 * time.Millisecond},
		{"p95 of 20 is the 19th", twenty, 95, 19 * time.Millisecond},
		{"p99 of 20 is the maximum", twenty, 99, 20 * time.Millisecond},
		{"p100 is the maximum", twenty, 100, 20 * time.Millisecond},
		{"tiny p is the minimum", twenty, 0.1, 1 * time.Millisecond},
		{"p50 of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p50 of 3 is the middle", msList(1, 2, 3), 50, 2 * time.Millisecond},
		{"p50 of 4 is the lower middle, never an average", msList(1, 2, 3, 4), 50, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsACopyAndRoundsToMicroseconds(t *testing.T) {
	samples := msList(30, 10, 20)
	samples[0] += 1234567 * time.Nanosecond // 31.234567 ms
	s := Summarize(samples)
	want := Summary{N: 3, MinMS: 10, P50MS: 20, P95MS: 31.235, P99MS: 31.235}
	if *s != want {
		t.Errorf("Summarize = %+v, want %+v", *s, want)
	}
	if samples[0] != 31234567*time.Nanosecond || samples[1] != 10*time.Millisecond {
		t.Errorf("Summarize reordered its input: %v", samples)
	}
}

func TestSummarizeOfNothingIsNil(t *testing.T) {
	if s := Summarize(nil); s != nil {
		t.Errorf("Summarize(nil) = %+v, want nil", s)
	}
}

func TestSummaryIsOrdered(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(60)
		samples := make([]time.Duration, n)
		for i := range samples {
			samples[i] = time.Duration(rng.Int64N(int64(time.Second)))
		}
		s := Summarize(samples)
		if s.N != n || !(s.MinMS <= s.P50MS && s.P50MS <= s.P95MS && s.P95MS <= s.P99MS) {
			t.Fatalf("summary of %d samples out of order: %+v", n, s)
		}
	}
}
