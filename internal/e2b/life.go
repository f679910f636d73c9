package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// pauseOptions maps the pause body's `memory` (the SDKs' keepMemory) onto
// space's suspend: false drops memory and keeps the disk, so the resume
// (connect) boots the sandbox afresh; absent or true keeps it.
func pauseOptions(memory *bool) controlplane.SuspendOptions {
	return controlplane.SuspendOptions{DropMemory: memory != nil && !*memory}
}

// pauseMemory carries create's autoPauseMemory (lifecycle.onTimeout
// keepMemory) into the request: false makes the timeout's pause keep only
// the disk. A sandbox paused that way cannot wake on traffic (its
// processes are gone), so autoResume with it is refused, as the SDKs do.
func (req *newSandbox) pauseMemory(out *apiv1.CreateSandboxRequest) string {
	if req.AutoPauseMemory == nil || *req.AutoPauseMemory {
		return ""
	}
	if req.AutoPause == nil || !*req.AutoPause {
		return "autoPauseMemory is only allowed when autoPause is true (onTimeout action pause)"
	}
	if req.AutoResume != nil && req.AutoResume.Enabled != nil && *req.AutoResume.Enabled {
		return "autoResume: true is not valid with autoPauseMemory: false: a filesystem-only pause is resumed explicitly with connect"
	}
	keep := false
	out.KeepMemory = &keep
	if out.AutoResume == nil {
		// The native default wakes on traffic; a cold boot on traffic is
		// not what an E2B caller asked for.
		off := false
		out.AutoResume = &off
	}
	return ""
}

// maxMetricsSandboxes bounds the sandbox ids of one GET /sandboxes/metrics.
const maxMetricsSandboxes = 100

// metrics is GET /sandboxes/{id}/metrics?start=&end= (Unix seconds, both
// optional): the samples the sandbox's node took within the range, oldest
// first, every 5 s while it ran, kept an hour. start defaults to the
// sandbox's creation and end to now; a range before the sandbox existed
// has none. Reading them never resumes a paused sandbox.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.visible(id); err != nil {
		h.fail(w, err)
		return
	}
	q := r.URL.Query()
	now := time.Now()
	// No start is the beginning of the history; the control plane starts
	// it at the sandbox's creation.
	start, ok := unixParam(w, q, "start", time.Unix(0, 0))
	if !ok {
		return
	}
	end, ok := unixParam(w, q, "end", now)
	if !ok {
		return
	}
	if q.Get("end") != "" {
		// Seconds name whole seconds: the samples of the end's second
		// (stamped to the nanosecond) are inside.
		end = end.Add(time.Second - time.Nanosecond)
	}
	if end.Before(start) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("end (%d) is before start (%d)", end.Unix(), start.Unix()))
		return
	}
	out := []sandboxMetric{}
	if end.After(now) {
		end = now // nothing is sampled in the future
	}
	if !start.After(end) {
		samples, err := h.cfg.ControlPlane.Metrics(r.Context(), id, start, end)
		if err != nil {
			h.fail(w, err)
			return
		}
		for _, m := range samples {
			out = append(out, metricView(m))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// metricsOfMany is GET /sandboxes/metrics?sandbox_ids=a,b: the latest
// sample of each running sandbox named that the key sees, by id. Ids the
// key does not see, unknown ones and sandboxes not running are left out,
// so the answer tells nothing of other projects.
func (h *Handler) metricsOfMany(w http.ResponseWriter, r *http.Request) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		writeError(w, http.StatusBadRequest, "sandbox_ids is required: a comma-separated list of sandbox ids")
		return
	}
	if len(ids) > maxMetricsSandboxes {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("at most %d sandbox_ids at once, got %d", maxMetricsSandboxes, len(ids)))
		return
	}
	out := map[string]sandboxMetric{}
	now := time.Now()
	for _, id := range ids {
		s, err := h.cfg.ControlPlane.Get(scopeOf(r), id)
		if err != nil || s.State != apiv1.StateRunning {
			continue
		}
		samples, err := h.cfg.ControlPlane.Metrics(r.Context(), id, now.Add(-nodeapi.MetricsRetention), now)
		if err != nil {
			h.log.Warn("metrics of a listed sandbox", "sandbox", id, "err", err)
			continue
		}
		if len(samples) > 0 {
			out[id] = metricView(samples[len(samples)-1])
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// maxUnix is the last second a timestamp can name (9999-12-31).
const maxUnix = 253402300799

// unixParam parses an optional query parameter of Unix seconds.
func unixParam(w http.ResponseWriter, q url.Values, name string, def time.Time) (time.Time, bool) {
	raw := q.Get(name)
	if raw == "" {
		return def, true
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 || n > maxUnix {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be a Unix time in seconds, got %q", name, raw))
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

func metricView(m nodeapi.MetricSample) sandboxMetric {
	ts := m.Time.UTC()
	return sandboxMetric{
		Timestamp: ts.Format(time.RFC3339), TimestampUnix: ts.Unix(), CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	}
}

// mcpRefused checks create's mcp option (the MCP servers the SDK then
// hands the template's gateway, `mcp-gateway --config`): it needs a JSON
// object and a template that declares a gateway (recipe mcp.gateway). The
// SDK, not the server, starts the gateway and makes its token, as on E2B:
// the create answer carries nothing of MCP, and the SDK's getMcpUrl() is
// port 50005 at /mcp. The message is "" when the option is absent or can
// be served.
func (h *Handler) mcpRefused(scope project.Scope, req *newSandbox) string {
	if raw := strings.TrimSpace(string(req.MCP)); raw == "" || raw == "null" {
		return "" // an empty object still has the SDK start the gateway
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(req.MCP, &servers); err != nil {
		return "mcp must be an object of MCP server configurations: " + err.Error()
	}
	tpl, err := h.cfg.ControlPlane.ResolveTemplate(scope, req.TemplateID)
	switch {
	case errors.Is(err, controlplane.ErrUnknownTemplate):
		return fmt.Sprintf("mcp needs a template with an MCP gateway, and template %q is not found (space has no built-in %s template: build one whose recipe declares mcp.gateway, see docs/e2b.md)", req.TemplateID, defaultMCPTemplate)
	case err != nil:
		return "" // not ready, ...: create answers as it does for any template
	case tpl.MCPGateway == "":
		return fmt.Sprintf("mcp is not available for template %q: it provides no MCP gateway (its recipe declares none with mcp.gateway); remove the mcp option or use a template that has one", req.TemplateID)
	}
	return ""
}

// defaultMCPTemplate is the template the SDKs create from when mcp is
// given without one.
const defaultMCPTemplate = "mcp-gateway"
