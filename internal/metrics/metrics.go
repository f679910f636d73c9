// Package metrics keeps the few counters, gauges and histograms space
// exports and writes them in the Prometheus text exposition format.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
)

// Registry holds metrics in registration order.
type Registry struct {
	mu      sync.Mutex
	writers []func(io.Writer)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

func (r *Registry) add(w func(io.Writer)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writers = append(r.writers, w)
}

// WriteText writes every metric.
func (r *Registry) WriteText(w io.Writer) {
	r.mu.Lock()
	writers := append([]func(io.Writer){}, r.writers...)
	r.mu.Unlock()
	for _, write := range writers {
		write(w)
	}
}

// Histogram counts observations into fixed buckets.
type Histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64
	sum    float64
	total  uint64
}

// Histogram registers a histogram with the given upper bounds.
func (r *Registry) Histogram(name, help string, bounds []float64) *Histogram {
	h := &Histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
	r.add(func(w io.Writer) {
		h.mu.Lock()
		defer h.mu.Unlock()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		var cum uint64
		for i, b := range h.bounds {
			cum += h.counts[i]
			fmt.Fprintf(w, "%s_bucket{le=\"%s\"} %d\n", name, formatFloat(b), cum)
		}
		fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", name, h.total, name, formatFloat(h.sum), name, h.total)
	})
	return h
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
			break
		}
	}
	h.sum += v
	h.total++
}

// GaugeFunc registers a gauge whose values, one per label value, are read
// from fn at scrape time.
func (r *Registry) GaugeFunc(name, help, label string, fn func() map[string]float64) {
	r.add(func(w io.Writer) {
		values := fn()
		keys := make([]string, 0, len(values))
		for k := range values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, k := range keys {
			fmt.Fprintf(w, "%s{%s=\"%s\"} %s\n", name, label, escape(k), formatFloat(values[k]))
		}
	})
}

// Counter is a monotonically increasing count.
type Counter struct {
	mu sync.Mutex
	v  float64
}

// Counter registers a counter.
func (r *Registry) Counter(name, help string) *Counter {
	c := &Counter{}
	r.add(func(w io.Writer) {
		c.mu.Lock()
		defer c.mu.Unlock()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %s\n", name, help, name, name, formatFloat(c.v))
	})
	return c
}

// Inc adds one.
func (c *Counter) Inc() {
	c.mu.Lock()
	c.v++
	c.mu.Unlock()
}

func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
