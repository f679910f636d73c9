package node

import (
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

func TestMetricsHistoryBoundedPrunedAndRanged(t *testing.T) {
	var h metricsHistory
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Two hours of samples: only the last maxSamples stay.
	n := 2 * maxSamples
	for i := 0; i < n; i++ {
		h.add("a", nodeapi.MetricSample{Time: base.Add(time.Duration(i) * nodeapi.MetricsInterval), CPUCount: i})
	}
	all := h.between("a", base, base.Add(3*time.Hour))
	if len(all) != maxSamples || all[0].CPUCount != n-maxSamples || all[len(all)-1].CPUCount != n-1 {
		t.Fatalf("kept %d samples, %d..%d; want the last %d", len(all), all[0].CPUCount, all[len(all)-1].CPUCount, maxSamples)
	}
	// Bounds are included.
	at := all[10].Time
	if got := h.between("a", at, at); len(got) != 1 || !got[0].Time.Equal(at) {
		t.Fatalf("range [t, t]: %+v", got)
	}
	if got := h.between("a", base.Add(-time.Hour), base); len(got) != 0 {
		t.Fatalf("a range before the history: %+v", got)
	}
	if got := h.between("nobody", base, base.Add(3*time.Hour)); got == nil || len(got) != 0 {
		t.Fatalf("an unknown sandbox: %#v, want an empty, non-nil list", got)
	}
	// Pruning drops what is older than the retention, and empty histories.
	last := all[len(all)-1].Time
	h.add("b", nodeapi.MetricSample{Time: last.Add(-2 * nodeapi.MetricsRetention)})
	h.prune(last.Add(nodeapi.MetricsRetention / 2))
	kept := h.between("a", base, base.Add(3*time.Hour))
	if len(kept) == 0 || len(kept) >= maxSamples || kept[0].Time.Before(last.Add(-nodeapi.MetricsRetention/2)) {
		t.Fatalf("after prune: %d samples from %s", len(kept), kept[0].Time)
	}
	if _, ok := h.bySandbox["b"]; ok {
		t.Fatal("a history with nothing recent left was kept")
	}
	h.forget("a")
	if got := h.between("a", base, base.Add(3*time.Hour)); len(got) != 0 {
		t.Fatalf("forgotten: %+v", got)
	}
}
