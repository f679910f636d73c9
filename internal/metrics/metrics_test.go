package metrics

import (
	"strings"
	"testing"
)

func TestTextExposition(t *testing.T) {
	r := NewRegistry()
	h := r.Histogram("lat_seconds", "Latency.", []float64{0.1, 1})
	h.Observe(0.05)
	h.Observe(0.5)
	h.Observe(5)
	r.GaugeFunc("things", "Things by kind.", "kind", func() map[string]float64 { return map[string]float64{"b": 2, "a": 1} })
	c := r.Counter("events_total", "Events.")
	c.Inc()
	var b strings.Builder
	r.WriteText(&b)
	for _, want := range []string{
		`lat_seconds_bucket{le="0.1"} 1`, `lat_seconds_bucket{le="1"} 2`, `lat_seconds_bucket{le="+Inf"} 3`,
		`lat_seconds_count 3`, "things{kind=\"a\"} 1\nthings{kind=\"b\"} 2", "events_total 1",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("exposition lacks %q:\n%s", want, b.String())
		}
	}
}
