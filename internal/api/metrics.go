package api

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// sandboxMetrics is GET /v1/sandboxes/{id}/metrics?start=&end= (RFC 3339,
// both optional): the resource samples the sandbox's node took within the
// range, every nodeapi.MetricsInterval while it ran, kept for
// nodeapi.MetricsRetention. start defaults to the sandbox's creation, end
// to now; nothing from before the sandbox existed is returned.
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := time.Now()
	start, ok := timeParam(w, q, "start", time.Unix(0, 0))
	if !ok {
		return
	}
	end, ok := timeParam(w, q, "end", now)
	if !ok {
		return
	}
	if end.Before(start) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("end (%s) is before start (%s)", end.Format(time.RFC3339), start.Format(time.RFC3339)))
		return
	}
	out := apiv1.MetricsList{
		Metrics:    []apiv1.MetricSample{},
		IntervalS:  int(nodeapi.MetricsInterval / time.Second),
		RetentionS: int(nodeapi.MetricsRetention / time.Second),
	}
	if end.After(now) {
		end = now
	}
	if !start.After(end) {
		samples, err := s.cp.Metrics(r.Context(), r.PathValue("id"), start, end)
		if err != nil {
			s.fail(w, err)
			return
		}
		out.Metrics = append(out.Metrics, samples...)
	}
	writeJSON(w, http.StatusOK, out)
}

// The range a timestamp may name (what the node protocol carries).
var (
	minTime = time.Unix(0, 0)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// timeParam parses an optional RFC 3339 query parameter.
func timeParam(w http.ResponseWriter, q url.Values, name string, def time.Time) (time.Time, bool) {
	raw := q.Get(name)
	if raw == "" {
		return def, true
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil || t.Before(minTime) || t.After(maxTime) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be an RFC 3339 time after 1970, got %q", name, raw))
		return time.Time{}, false
	}
	return t, true
}
