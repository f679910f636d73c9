package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/sandboxid"
)

// The contract's pool values.
type (
	PoolLimits = nodeapi.PoolLimits
	PoolStatus = nodeapi.PoolStatus
)

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

// maxPoolSize bounds one template's pool on a node, whatever a caller asks.
const maxPoolSize = 256

// SetPool sets how many idle sandboxes of the template to keep ready; 0
// drains the pool. Pooled sandboxes wait with the network policy their
// owners will most likely ask for, held (nothing gets out): a claim with
// that policy only lifts the hold instead of reloading the gateway's rules.
func (n *Node) SetPool(_ context.Context, req nodeapi.PoolRequest) error {
	if err := checkTemplateID(req.Template.ID); err != nil {
		return err
	}
	if req.Size < 0 || req.Size > maxPoolSize {
		return fmt.Errorf("pool of %s: size must be between 0 and %d, got %d", req.Template.ID, maxPoolSize, req.Size)
	}
	if req.Size > 0 {
		if err := checkTemplate(req.Template); err != nil {
			return err
		}
	}
	n.setPoolSize(req.Template, req.Limits, req.Waiting, req.Size)
	return nil
}

func (n *Node) setPoolSize(tpl TemplateSpec, limits PoolLimits, waiting network.Policy, size int) {
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
	st := p.status()
	n.pools.mu.Unlock()
	n.poolChanged(tpl.ID, st)
	for _, id := range drain {
		_ = n.release(context.Background(), id)
	}
	if start {
		go n.fill(tpl.ID)
	}
}

func (p *warmPool) status() PoolStatus { return PoolStatus{Size: p.size, Ready: len(p.ready)} }

// Pool reports a template's pool.
func (n *Node) Pool(_ context.Context, templateID string) (PoolStatus, error) {
	if err := checkTemplateID(templateID); err != nil {
		return PoolStatus{}, err
	}
	n.pools.mu.Lock()
	defer n.pools.mu.Unlock()
	p, ok := n.pools.byTpl[templateID]
	if !ok {
		return PoolStatus{}, nil
	}
	return p.status(), nil
}

// poolStatuses reports every pool that keeps sandboxes or still holds some.
func (n *Node) poolStatuses() map[string]PoolStatus {
	n.pools.mu.Lock()
	defer n.pools.mu.Unlock()
	out := map[string]PoolStatus{}
	for id, p := range n.pools.byTpl {
		if p.size > 0 || len(p.ready) > 0 {
			out[id] = p.status()
		}
	}
	return out
}

// Claim takes a ready sandbox of the template if one matches the limits,
// gives it its identity and its owner's network policy, and returns its id.
// The identity is completed with that id (SPACE_SANDBOX_ID and sandbox_id),
// which the caller cannot know before. A sandbox that cannot be given
// them is released and the error returned; nothing is claimed then.
func (n *Node) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.ClaimResult, error) {
	if err := checkTemplateID(req.TemplateID); err != nil {
		return nodeapi.ClaimResult{}, err
	}
	id, ok := n.claim(req.TemplateID, req.Limits)
	if !ok {
		return nodeapi.ClaimResult{}, nil
	}
	identity := req.Identity
	identity.Env = maps.Clone(identity.Env)
	identity.Info = maps.Clone(identity.Info)
	if identity.Env == nil {
		identity.Env = map[string]string{}
	}
	if identity.Info == nil {
		identity.Info = map[string]string{}
	}
	identity.Env["SPACE_SANDBOX_ID"], identity.Info["sandbox_id"] = id, id
	// The re-key (a call to the agent) and the owner's network policy (the
	// host's rules) are independent, so they go at once: the claim costs
	// the longer of the two, not their sum. Pooled sandboxes wait with no
	// way out and run nothing of a tenant's until the claim returns, so
	// opening the network a moment before the re-key ends exposes nothing.
	netErr := make(chan error, 1)
	go func() {
		err := n.SetNetwork(ctx, id, req.Network)
		if errors.Is(err, ErrNoEgress) {
			err = nil // a node without egress leaves every sandbox without one
		}
		netErr <- err
	}()
	err := errors.Join(n.Rekey(ctx, id, identity), <-netErr)
	if err != nil {
		if rerr := n.release(context.WithoutCancel(ctx), id); rerr != nil {
			n.log.Error("release a pooled sandbox that could not be claimed", "sandbox", id, "err", rerr)
		}
		return nodeapi.ClaimResult{}, fmt.Errorf("claim a pooled sandbox of %s: %w", req.TemplateID, err)
	}
	return nodeapi.ClaimResult{Claimed: true, ID: id}, nil
}

// claim takes a ready sandbox of the template off its pool.
func (n *Node) claim(templateID string, limits PoolLimits) (string, bool) {
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
	st := p.status()
	n.pools.mu.Unlock()
	n.poolChanged(templateID, st)
	if start {
		go n.fill(templateID)
	}
	return id, true
}

// Rekey gives a claimed sandbox its identity.
func (n *Node) Rekey(ctx context.Context, id string, identity Identity) error {
	if err := checkID(id); err != nil {
		return err
	}
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
		added := len(p.ready) < p.size && p.tpl.ID == tpl.ID
		if added {
			p.ready = append(p.ready, id)
			id = ""
		}
		st := p.status()
		n.pools.mu.Unlock()
		if added {
			n.poolChanged(templateID, st)
		}
		if id != "" { // the pool shrank meanwhile
			_ = n.release(context.Background(), id)
		}
	}
}

func (n *Node) restorePooled(tpl TemplateSpec, limits PoolLimits, waiting network.Policy) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A pool is of the template's default backend (the control plane
	// claims from it only for creates on that backend).
	img, err := n.templateImage(ctx, tpl, n.imageKeyFor(tpl, tpl.DefaultRuntime(), limits.Limits), true)
	if err != nil {
		return "", err
	}
	id := sandboxid.New()
	err = n.resumeFrom(ctx, RestoreSpec{
		ID: id, Runtime: img.Runtime, FromVolume: img.Volume, Limits: limits.Limits, DiskMB: limits.DiskMB,
		AccessToken: img.Token, Network: waiting,
	}, img.ImageDir)
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
