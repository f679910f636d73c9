package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// The node keeps each sandbox's resource history itself, in memory: it is
// the one place that sees the sandbox whichever control-plane replica asks,
// and asking the sandbox's agent costs no round trip between machines.
// The history goes with the node process; a sandbox moved to another node
// starts a new one there.
const (
	// metricsSampleTimeout bounds one sample: a frozen (paused) sandbox
	// does not answer and is skipped.
	metricsSampleTimeout = 2 * time.Second
	// metricsTick is how often the sampler looks for sandboxes due.
	metricsTick = time.Second
	// metricsParallel bounds the samples taken at once.
	metricsParallel = 8
	// metricsBodyLimit bounds what an agent's answer may hold in memory.
	metricsBodyLimit = 4 << 10
	maxSamples       = int(nodeapi.MetricsRetention / nodeapi.MetricsInterval)
)

// metricsHistory is every sandbox's samples, oldest first.
type metricsHistory struct {
	mu        sync.Mutex
	bySandbox map[string][]nodeapi.MetricSample
}

func (h *metricsHistory) add(id string, m nodeapi.MetricSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bySandbox == nil {
		h.bySandbox = map[string][]nodeapi.MetricSample{}
	}
	s := append(h.bySandbox[id], m)
	if len(s) > maxSamples {
		s = append(s[:0:0], s[len(s)-maxSamples:]...)
	}
	h.bySandbox[id] = s
}

// prune drops the samples older than the retention, and the sandboxes
// left without any (stopped, suspended or moved away an hour ago).
func (h *metricsHistory) prune(now time.Time) {
	cutoff := now.Add(-nodeapi.MetricsRetention)
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, s := range h.bySandbox {
		i := sort.Search(len(s), func(i int) bool { return !s[i].Time.Before(cutoff) })
		switch {
		case i == len(s):
			delete(h.bySandbox, id)
		case i > 0:
			h.bySandbox[id] = append(s[:0:0], s[i:]...)
		}
	}
}

func (h *metricsHistory) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.bySandbox, id)
}

// between returns a copy of id's samples within [start, end].
func (h *metricsHistory) between(id string, start, end time.Time) []nodeapi.MetricSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []nodeapi.MetricSample{}
	for _, m := range h.bySandbox[id] {
		if !m.Time.Before(start) && !m.Time.After(end) {
			out = append(out, m)
		}
	}
	return out
}

// Metrics returns the samples of sandbox id taken within [start, end].
func (n *Node) Metrics(_ context.Context, id string, start, end time.Time) ([]nodeapi.MetricSample, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if end.Before(start) {
		return nil, fmt.Errorf("metrics of %s: end %s is before start %s", id, end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	return n.metrics.between(id, start, end), nil
}

// sampleMetrics samples every sandbox the node runs each MetricsInterval
// until ctx ends. It looks every metricsTick, so that a new sandbox has
// its first sample within about a second. Pooled sandboxes nobody claimed
// are not sampled: their history would begin before their owner made them.
func (n *Node) sampleMetrics(ctx context.Context) {
	t := time.NewTicker(metricsTick)
	defer t.Stop()
	tried := map[string]time.Time{} // last sample attempt, by sandbox
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		pooled := n.pooledIDs()
		sem := make(chan struct{}, metricsParallel)
		var wg sync.WaitGroup
		seen := map[string]bool{}
		for _, sb := range n.watched() {
			seen[sb.ID] = true
			if !sb.watched() || pooled[sb.ID] || now.Sub(tried[sb.ID]) < nodeapi.MetricsInterval {
				continue // stopped, suspending, waiting in a pool, or sampled lately
			}
			tried[sb.ID] = now
			wg.Add(1)
			sem <- struct{}{}
			go func(sb *Sandbox) {
				defer func() { <-sem; wg.Done() }()
				m, err := sampleAgent(ctx, sb)
				if err != nil {
					n.log.Debug("sample sandbox metrics", "sandbox", sb.ID, "err", err)
					return
				}
				n.metrics.add(sb.ID, m)
			}(sb)
		}
		wg.Wait()
		for id := range tried {
			if !seen[id] {
				delete(tried, id)
			}
		}
		n.metrics.prune(now)
	}
}

// sampleAgent reads the agent's GET /metrics (envd's figures, measured
// inside the sandbox) and stamps it with the node's clock: the sandbox's
// own clock is the sandbox's to set.
func sampleAgent(ctx context.Context, sb *Sandbox) (nodeapi.MetricSample, error) {
	ctx, cancel := context.WithTimeout(ctx, metricsSampleTimeout)
	defer cancel()
	// Stamped when asked: the answer's latency (a busy host) must not
	// skew the history's 5 s grid.
	at := time.Now().UTC()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentBaseURL+"/metrics", nil)
	if err != nil {
		return nodeapi.MetricSample{}, err
	}
	resp, err := sb.Agent.http.Do(req)
	if err != nil {
		return nodeapi.MetricSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nodeapi.MetricSample{}, fmt.Errorf("agent answered %s", resp.Status)
	}
	var m struct {
		CPUCount   int     `json:"cpu_count"`
		CPUUsedPct float64 `json:"cpu_used_pct"`
		MemTotal   uint64  `json:"mem_total"`
		MemUsed    uint64  `json:"mem_used"`
		MemCache   uint64  `json:"mem_cache"`
		DiskUsed   uint64  `json:"disk_used"`
		DiskTotal  uint64  `json:"disk_total"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, metricsBodyLimit)).Decode(&m); err != nil {
		return nodeapi.MetricSample{}, fmt.Errorf("decode agent metrics: %w", err)
	}
	// The figures come from inside the sandbox: keep them sane.
	pct := m.CPUUsedPct
	if math.IsNaN(pct) || pct < 0 {
		pct = 0
	}
	return nodeapi.MetricSample{
		Time: at, CPUCount: max(m.CPUCount, 0), CPUUsedPct: min(pct, 100),
		MemUsed: min(m.MemUsed, m.MemTotal), MemTotal: m.MemTotal, MemCache: min(m.MemCache, m.MemTotal),
		DiskUsed: min(m.DiskUsed, m.DiskTotal), DiskTotal: m.DiskTotal,
	}, nil
}

// pooledIDs are the ids of the sandboxes waiting in the node's pools.
func (n *Node) pooledIDs() map[string]bool {
	n.pools.mu.Lock()
	defer n.pools.mu.Unlock()
	out := map[string]bool{}
	for _, p := range n.pools.byTpl {
		for _, id := range p.ready {
			out[id] = true
		}
	}
	return out
}
