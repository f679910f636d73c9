package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/space-platform/space/internal/cluster"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

const poolBucket = "pools"

// maxPoolSize bounds one template's warm pool.
const maxPoolSize = 64

// poolSetting is a template's persisted warm pool size.
type poolSetting struct {
	Template string `json:"template"`
	Size     int    `json:"size"`
}

// SetPoolSize keeps size sandboxes of the template restored and idle, with
// the default limits; creates that ask for those limits take one. size is
// the cluster's: it is split over the nodes (splitPool). The setting is
// persisted and applied again after a restart and when nodes join.
func (cp *ControlPlane) SetPoolSize(template string, size int) (nodeapi.PoolStatus, error) {
	if size < 0 || size > maxPoolSize {
		return nodeapi.PoolStatus{}, invalid("pool size must be between 0 and %d, got %d", maxPoolSize, size)
	}
	tpl, name, err := cp.cfg.Templates.Resolve(project.Everything, template)
	if err != nil {
		return nodeapi.PoolStatus{}, err
	}
	if err := cp.cfg.Store.Put(poolBucket, name, poolSetting{Template: name, Size: size}); err != nil {
		return nodeapi.PoolStatus{}, fmt.Errorf("persist pool size: %w", err)
	}
	ctx := context.Background()
	if err := cp.setPool(ctx, tpl, size); err != nil {
		return nodeapi.PoolStatus{}, fmt.Errorf("set pool of %s: %w", name, err)
	}
	return cp.poolStatus(ctx, tpl.ID)
}

// poolNodes are the nodes a pool of template tpl is split over: the
// joined nodes that take new sandboxes and hold the template. When none
// says it holds it (serve's node does not list its templates), every node
// that takes sandboxes.
func (cp *ControlPlane) poolNodes(ctx context.Context, templateID string) map[string]Node {
	schedulable, holding := map[string]Node{}, map[string]Node{}
	for _, id := range cp.fleet.nodes() {
		if cp.cfg.Nodes.State(id) != cluster.Ready {
			continue
		}
		n, err := cp.node(id, "")
		if err != nil {
			continue
		}
		schedulable[id] = n
		if info, err := n.Info(ctx); err == nil &&
			(slices.Contains(info.Templates, templateID) || slices.Contains(info.TemplateImages, templateID)) {
			holding[id] = n
		}
	}
	if len(holding) == 0 {
		return schedulable
	}
	return holding
}

// splitPool divides a pool of size over k nodes: ceil(size/k) each, in
// order, until size is used up (2 over 3 nodes is 1, 1, 0).
func splitPool(size, k int) []int {
	out := make([]int, k)
	if k == 0 {
		return out
	}
	each := (size + k - 1) / k
	for i := range out {
		out[i] = min(each, size)
		size -= out[i]
	}
	return out
}

// setPool splits a pool of size over the template's nodes (by id order)
// and sets each node's share; the other joined nodes hold none.
func (cp *ControlPlane) setPool(ctx context.Context, tpl nodeapi.TemplateSpec, size int) error {
	nodes := cp.poolNodes(ctx, tpl.ID)
	ids := slices.Sorted(maps.Keys(nodes))
	shares := map[string]int{}
	for i, share := range splitPool(size, len(ids)) {
		shares[ids[i]] = share
	}
	var errs []error
	for _, id := range cp.fleet.nodes() {
		n, ok := nodes[id]
		if !ok {
			if cp.cfg.Nodes.State(id) != cluster.Ready {
				continue // it keeps what it had; it gets its share when it joins again
			}
			if n, ok = cp.nodeOrNil(id); !ok {
				continue
			}
		}
		if err := n.SetPool(ctx, cp.poolRequest(tpl, shares[id])); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// nodeOrNil is node id, if it answers.
func (cp *ControlPlane) nodeOrNil(id string) (Node, bool) {
	n, err := cp.node(id, "")
	return n, err == nil
}

// poolStatus sums the template's pools over the nodes.
func (cp *ControlPlane) poolStatus(ctx context.Context, templateID string) (nodeapi.PoolStatus, error) {
	var sum nodeapi.PoolStatus
	var errs []error
	for _, id := range cp.fleet.nodes() {
		n, ok := cp.nodeOrNil(id)
		if !ok {
			continue
		}
		st, err := n.Pool(ctx, templateID)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", id, err))
			continue
		}
		sum.Size += st.Size
		sum.Ready += st.Ready
	}
	return sum, errors.Join(errs...)
}

// poolRequest keeps size sandboxes of tpl with the default limits, waiting
// under the default policy.
func (cp *ControlPlane) poolRequest(tpl nodeapi.TemplateSpec, size int) nodeapi.PoolRequest {
	d := cp.cfg.Defaults
	return nodeapi.PoolRequest{Template: tpl, Limits: cp.poolLimits(d.VCPUs, d.MemoryMB, d.DiskMB), Waiting: cp.defaultPolicy(), Size: size}
}

// defaultPolicy is the network policy of a create request that sets none,
// which pooled sandboxes wait under.
func (cp *ControlPlane) defaultPolicy() network.Policy {
	return Sandbox{Network: &NetworkPolicy{AllowInternet: true}, Traffic: cp.trafficOf(nil)}.policy()
}

// PoolStatus reports the warm pool of a template (by id), summed over the
// nodes; those that cannot say count none.
func (cp *ControlPlane) PoolStatus(templateID string) nodeapi.PoolStatus {
	st, err := cp.poolStatus(context.Background(), templateID)
	if err != nil {
		cp.log.Warn("pool status", "template", templateID, "err", err)
	}
	return st
}

// ApplyPools starts the warm pools: persisted sizes win over the given
// defaults (template name → size), which are kept for the nodes that join
// later. Templates that are not ready yet are skipped; call again when
// they are.
func (cp *ControlPlane) ApplyPools(defaults map[string]int) {
	cp.fleet.mu.Lock()
	cp.fleet.poolDefaults = maps.Clone(defaults)
	cp.fleet.mu.Unlock()
	cp.applyPools(context.Background())
}

// RefreshPools sets every pool over the nodes joined now again: a node
// reported templates it did not hold before, whose pools could not be set.
func (cp *ControlPlane) RefreshPools() { cp.applyPools(context.Background()) }

// applyPools sets every pool over the nodes joined now.
func (cp *ControlPlane) applyPools(ctx context.Context) {
	for name, size := range cp.poolSizes() {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, name)
		if err != nil {
			continue
		}
		if err := cp.setPool(ctx, tpl, size); err != nil {
			cp.log.Error("set pool", "template", name, "err", err)
		}
	}
}

// poolSizes are the pools' sizes by template name: the persisted sizes
// over the defaults.
func (cp *ControlPlane) poolSizes() map[string]int {
	cp.fleet.mu.Lock()
	sizes := maps.Clone(cp.fleet.poolDefaults)
	cp.fleet.mu.Unlock()
	if sizes == nil {
		sizes = map[string]int{}
	}
	saved, err := store.All[poolSetting](cp.cfg.Store, poolBucket)
	if err != nil {
		cp.log.Error("load pool sizes", "err", err)
	}
	for _, p := range saved {
		sizes[p.Template] = p.Size
	}
	return sizes
}

// poolsReady is the space_pool_ready gauge: the ready sandboxes of every
// warm pool with a size, by template name, summed over the nodes.
func (cp *ControlPlane) poolsReady() map[string]float64 {
	out := map[string]float64{}
	for name, size := range cp.poolSizes() {
		if size <= 0 {
			continue
		}
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, name)
		if err != nil {
			continue
		}
		out[name] = float64(cp.PoolStatus(tpl.ID).Ready)
	}
	return out
}

// ForgetTemplate drops a deleted template's image and pool on every node
// that answers.
func (cp *ControlPlane) ForgetTemplate(name, templateID string) {
	ctx := context.Background()
	for _, id := range cp.fleet.nodes() {
		n, ok := cp.nodeOrNil(id)
		if !ok {
			continue
		}
		if err := n.SetPool(ctx, nodeapi.PoolRequest{Template: nodeapi.TemplateSpec{ID: templateID}}); err != nil {
			cp.log.Error("drain pool", "template", templateID, "node", id, "err", err)
		}
		if err := n.DropTemplateImage(ctx, templateID); err != nil {
			cp.log.Error("drop template image", "template", templateID, "node", id, "err", err)
		}
	}
	_ = cp.cfg.Store.Delete(poolBucket, name)
}
