package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// claimMetric is the control plane's histogram of the node's claims of
// pooled sandboxes: the re-key of the agent (POST /init) and the owner's
// network policy, which is all a pooled create asks of the node.
const claimMetric = "space_pool_claim_seconds"

// claimTotals are the histogram's running sum and count.
type claimTotals struct {
	sum   float64
	count int64
}

// readClaims scrapes GET /metrics (served without a key) for claimMetric;
// found is false when the server does not export it (older servers).
func readClaims(ctx context.Context, baseURL string) (t claimTotals, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return t, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return t, false, fmt.Errorf("read the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return t, false, fmt.Errorf("read the server's metrics: status %d", resp.StatusCode)
	}
	var sawSum, sawCount bool
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		switch {
		case !ok:
		case name == claimMetric+"_sum":
			t.sum, err = strconv.ParseFloat(value, 64)
			sawSum = true
		case name == claimMetric+"_count":
			t.count, err = strconv.ParseInt(value, 10, 64)
			sawCount = true
		}
		if err != nil {
			return t, false, fmt.Errorf("read the server's metrics: %s: %w", sc.Text(), err)
		}
	}
	if err := sc.Err(); err != nil {
		return t, false, fmt.Errorf("read the server's metrics: %w", err)
	}
	return t, sawSum && sawCount, nil
}

// claimFloor collects, around each create_pooled sample, the claim the
// server timed for it.
type claimFloor struct {
	baseURL string
	// on is false once the floor cannot be taken (err says why, or the
	// server has no metric).
	on      bool
	err     error
	claims  []time.Duration
	missed  int // samples the pool did not serve (count unchanged)
	crowded int // samples during which others claimed too
}

// around runs sample and attributes the claims between before and after
// to it: exactly one is this sample's.
func (f *claimFloor) around(ctx context.Context, sample func() (time.Duration, error)) (time.Duration, error) {
	if !f.on {
		return sample()
	}
	before, _, err := readClaims(ctx, f.baseURL)
	if err != nil {
		f.on, f.err = false, err
		return sample()
	}
	d, err := sample()
	if err != nil {
		return d, err
	}
	after, _, err := readClaims(ctx, f.baseURL)
	if err != nil {
		f.on, f.err = false, err
		return d, nil
	}
	switch after.count - before.count {
	case 1:
		f.claims = append(f.claims, time.Duration((after.sum-before.sum)*float64(time.Second)))
	case 0:
		f.missed++
	default:
		f.crowded++
	}
	return d, nil
}

// summary is the floor, or why there is none.
func (f *claimFloor) summary() (*Summary, error) {
	if f.err != nil {
		return nil, f.err
	}
	if len(f.claims) == 0 {
		return nil, fmt.Errorf("no sample was served by a claim the server timed (%d served otherwise, %d alongside other claims)", f.missed, f.crowded)
	}
	return Summarize(f.claims), nil
}
