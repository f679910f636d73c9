package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

// PoolLimits are the limits pooled sandboxes run with; only a request that
// asks for exactly these can take one.
type PoolLimits struct {
	Limits runtime.Limits
	DiskMB int
}

// warmPool keeps sandboxes of one template restored and idle, so a create
// only has to give one its identity.
type warmPool struct {
	tpl     TemplateSpec
	limits  PoolLimits
	waiting network.Policy
	size    int
	ready   []string
	filling bool
}

// PoolStatus is what a pool holds.
type PoolStatus struct {
	Size  int `json:"size"`
	Ready int `json:"ready"`
}

// foreground counts creates in progress; pool refills wait for it to drop
// to zero so they never compete with a request someone is waiting for.
type foreground struct{ n atomic.Int64 }

func (f *foreground) enter()     { f.n.Add(1) }
func (f *foreground) leave()     { f.n.Add(-1) }
func (f *foreground) busy() bool { return f.n.Load() > 0 }

// pools is the node's set of warm pools, by template id.
type pools struct {
	mu     sync.Mutex
	byTpl  map[string]*warmPool
	active foreground
}

// SetPoolSize sets how many idle sandboxes of the template to keep ready;
// 0 drains the pool. Pooled sandboxes wait with the network policy their
// owners will most likely ask for, held (nothing gets out): a claim with
// that policy only lifts the hold instead of reloading the gateway's rules.
func (n *Node) SetPoolSize(tpl TemplateSpec, limits PoolLimits, waiting network.Policy, size int) {
	n.pools.mu.Lock()
	if n.pools.byTpl == nil {
		n.pools.byTpl = map[string]*warmPool{}
	}
	p, ok := n.pools.byTpl[tpl.ID]
	if !ok {
		p = &warmPool{}
		n.pools.byTpl[tpl.ID] = p
	}
	waiting.Hold = true
	p.tpl, p.limits, p.waiting, p.size = tpl, limits, waiting, size
	var drain []string
	if len(p.ready) > size {
		drain = p.ready[size:]
		p.ready = p.ready[:size]
	}
	start := !p.filling && len(p.ready) < size
	if start {
		p.filling = true
	}
	n.pools.mu.Unlock()
	for _, id := range drain {
		_ = n.release(context.Background(), id)
	}
	if start {
		go n.fill(tpl.ID)
	}
}

// PoolStatus reports a template's pool.
func (n *Node) PoolStatus(templateID string) PoolStatus {
	n.pools.mu.Lock()
	defer n.pools.mu.Unlock()
	p, ok := n.pools.byTpl[templateID]
	if !ok {
		return PoolStatus{}
	}
	return PoolStatus{Size: p.size, Ready: len(p.ready)}
}

// Claim takes a ready sandbox of the template if one matches the limits.
// The caller gives it its identity (Rekey) or releases it.
func (n *Node) Claim(templateID string, limits PoolLimits) (string, bool) {
	n.pools.mu.Lock()
	p, ok := n.pools.byTpl[templateID]
	if !ok || len(p.ready) == 0 || p.limits != limits {
		n.pools.mu.Unlock()
		return "", false
	}
	id := p.ready[0]
	p.ready = p.ready[1:]
	start := !p.filling
	if start {
		p.filling = true
	}
	n.pools.mu.Unlock()
	if start {
		go n.fill(templateID)
	}
	return id, true
}

// Rekey gives a claimed sandbox its identity.
func (n *Node) Rekey(ctx context.Context, id string, identity Identity) error {
	sb, err := n.lookup(id)
	if err != nil {
		return err
	}
	return sb.rekey(ctx, identity)
}

// fill restores sandboxes into the pool until it is full, one at a time and
// only while no create is in progress.
func (n *Node) fill(templateID string) {
	for {
		n.pools.mu.Lock()
		p := n.pools.byTpl[templateID]
		if len(p.ready) >= p.size {
			p.filling = false
			n.pools.mu.Unlock()
			return
		}
		tpl, limits, waiting := p.tpl, p.limits, p.waiting
		n.pools.mu.Unlock()

		for n.pools.active.busy() {
			time.Sleep(10 * time.Millisecond)
		}
		id, err := n.restorePooled(tpl, limits, waiting)
		if err != nil {
			n.log.Warn("pool refill", "template", templateID, "err", err)
			time.Sleep(5 * time.Second)
			continue
		}
		n.pools.mu.Lock()
		p = n.pools.byTpl[templateID]
		if len(p.ready) < p.size && p.tpl.ID == tpl.ID {
			p.ready = append(p.ready, id)
			id = ""
		}
		n.pools.mu.Unlock()
		if id != "" { // the pool shrank meanwhile
			_ = n.release(context.Background(), id)
		}
	}
}

func (n *Node) restorePooled(tpl TemplateSpec, limits PoolLimits, waiting network.Policy) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := n.TemplateImage(ctx, tpl)
	if err != nil {
		return "", err
	}
	id := sandboxid.New()
	err = n.ResumeFrom(ctx, RestoreSpec{
		ID: id, ImageDir: img.ImageDir, FromVolume: img.Volume, Limits: limits.Limits, DiskMB: limits.DiskMB,
		AccessToken: img.Token, Network: waiting,
	})
	if err != nil {
		_ = n.release(context.Background(), id)
		return "", err
	}
	// A restore loads memory lazily; running one command now faults in
	// what the agent needs to start processes, so the first exec of the
	// tenant who claims this sandbox does not pay for it.
	if sb, err := n.lookup(id); err == nil {
		if _, err := sb.Exec(ctx, ExecSpec{Cmd: []string{"true"}, Timeout: 10 * time.Second}); err != nil {
			n.log.Warn("warm up pooled sandbox", "sandbox", id, "err", err)
		}
	}
	return id, nil
}
