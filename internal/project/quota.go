package project

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

const quotaBucket = "project_quotas"

// Quota is what one project may hold at once; zero fields are unlimited.
// MaxSandboxes counts sandboxes not stopped or failed (suspended ones
// count: they can resume at any time), MaxMemoryMB the sum of their
// memory_mb, MaxSnapshots stored snapshots (rolling ones included), and
// CreatesPerSecond sandbox creates (branches count one each), with bursts
// of up to max(1, CreatesPerSecond). Its wire form is the record's.
type Quota = apiv1.Quota

// Override is a project's own quota settings: a nil field takes the
// server's default.
type Override = apiv1.QuotaSettings

// ValidateOverride rejects negative limits.
func ValidateOverride(o Override) error {
	for name, v := range map[string]*int{"max_sandboxes": o.MaxSandboxes, "max_memory_mb": o.MaxMemoryMB, "max_snapshots": o.MaxSnapshots, "max_volume_mb": o.MaxVolumeMB, "max_template_disk_mb": o.MaxTemplateDiskMB} {
		if v != nil && *v < 0 {
			return fmt.Errorf("%s must be 0 (unlimited) or positive, got %d", name, *v)
		}
	}
	if r := o.CreatesPerSecond; r != nil && (*r < 0 || math.IsNaN(*r) || math.IsInf(*r, 0)) {
		return fmt.Errorf("creates_per_second must be 0 (unlimited) or positive, got %v", *r)
	}
	return nil
}

// over lays o over the defaults d.
func over(o Override, d Quota) Quota {
	if o.MaxSandboxes != nil {
		d.MaxSandboxes = *o.MaxSandboxes
	}
	if o.MaxMemoryMB != nil {
		d.MaxMemoryMB = *o.MaxMemoryMB
	}
	if o.MaxSnapshots != nil {
		d.MaxSnapshots = *o.MaxSnapshots
	}
	if o.CreatesPerSecond != nil {
		d.CreatesPerSecond = *o.CreatesPerSecond
	}
	if o.MaxVolumeMB != nil {
		d.MaxVolumeMB = *o.MaxVolumeMB
	}
	if o.MaxTemplateDiskMB != nil {
		d.MaxTemplateDiskMB = *o.MaxTemplateDiskMB
	}
	return d
}

// Quotas holds the server's default quota, each project's overrides
// (persisted) and the create-rate buckets (in memory: a restart refills
// them). It is safe for concurrent use.
type Quotas struct {
	st       store.Store
	defaults Quota
	// now is the clock of the rate limiter; tests replace it.
	now func() time.Time

	mu        sync.Mutex
	overrides map[string]Override
	buckets   map[string]*tokenBucket
}

type stored struct {
	Project  string   `json:"project"`
	Override Override `json:"override"`
}

// OpenQuotas loads the overrides from st (nil: in memory only).
func OpenQuotas(st store.Store, defaults Quota) (*Quotas, error) {
	q := &Quotas{st: st, defaults: defaults, now: time.Now, overrides: map[string]Override{}, buckets: map[string]*tokenBucket{}}
	if st == nil {
		return q, nil
	}
	if err := q.reload(); err != nil {
		return nil, err
	}
	return q, nil
}

// Defaults returns the server's default quota.
func (q *Quotas) Defaults() Quota { return q.defaults }

// Of returns project p's effective quota.
func (q *Quotas) Of(p string) Quota {
	q.mu.Lock()
	defer q.mu.Unlock()
	return over(q.overrides[Of(p)], q.defaults)
}

// Override returns project p's own settings.
func (q *Quotas) Override(p string) Override {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.overrides[Of(p)]
}

// Set replaces project p's overrides and returns its effective quota.
func (q *Quotas) Set(p string, o Override) (Quota, error) {
	if err := ValidName(p); err != nil {
		return Quota{}, err
	}
	if err := ValidateOverride(o); err != nil {
		return Quota{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st != nil {
		if err := q.st.Put(quotaBucket, p, stored{Project: p, Override: o}); err != nil {
			return Quota{}, fmt.Errorf("store quota of project %s: %w", p, err)
		}
	}
	q.overrides[p] = o
	delete(q.buckets, p) // a new rate starts with a full bucket
	return over(o, q.defaults), nil
}

// Projects lists the projects that have overrides, sorted.
func (q *Quotas) Projects() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.overrides))
	for p := range q.overrides {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// AllowCreate takes n creates from project p's rate budget. When the
// budget is short it takes nothing and says how long to wait.
func (q *Quotas) AllowCreate(p string, n int) (retryAfter time.Duration, ok bool) {
	p = Of(p)
	q.mu.Lock()
	defer q.mu.Unlock()
	rate := over(q.overrides[p], q.defaults).CreatesPerSecond
	if rate <= 0 {
		return 0, true
	}
	b := q.buckets[p]
	now := q.now()
	if b == nil || b.rate != rate {
		b = &tokenBucket{rate: rate, burst: math.Max(1, rate), tokens: math.Max(1, rate), at: now}
		q.buckets[p] = b
	}
	return b.take(now, float64(n))
}

// tokenBucket refills at rate tokens a second up to burst.
type tokenBucket struct {
	rate, burst, tokens float64
	at                  time.Time
}

// take removes n tokens if there are enough; a request for more than the
// burst needs a full bucket (and leaves it in debt), so large branch
// counts are possible but paid for.
func (b *tokenBucket) take(now time.Time, n float64) (time.Duration, bool) {
	if now.After(b.at) {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
	need := math.Min(n, b.burst)
	if b.tokens+1e-9 >= need {
		b.tokens -= n
		return 0, true
	}
	wait := time.Duration((need - b.tokens) / b.rate * float64(time.Second))
	return wait, false
}

// Follow keeps the overrides in step with what other processes write to
// a shared store (a quota set through another control-plane replica)
// until ctx ends; it returns at once on a store no one else writes.
func (q *Quotas) Follow(ctx context.Context) {
	if q.st == nil {
		return
	}
	// Few records, rarely changed: any change reads them all.
	// A failed read is tried again at the next change.
	reload := func() { _ = q.reload() }
	store.Follow(ctx, q.st, quotaBucket, reload, func(string) { reload() }, nil)
}

// reload replaces the overrides with the store's (all of them, at open).
func (q *Quotas) reload() error {
	all, err := store.All[stored](q.st, quotaBucket)
	if err != nil {
		return fmt.Errorf("load project quotas: %w", err)
	}
	overrides := make(map[string]Override, len(all))
	for _, s := range all {
		overrides[s.Project] = s.Override
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for p, o := range overrides {
		if !reflect.DeepEqual(q.overrides[p], o) { // pointers: compare what they hold
			delete(q.buckets, p) // a new rate starts with a full bucket
		}
	}
	q.overrides = overrides
	return nil
}
