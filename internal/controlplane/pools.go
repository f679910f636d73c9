package controlplane

import (
	"context"
	"fmt"

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
// the default limits; creates that ask for those limits take one. The
// setting is persisted and applied again after a restart.
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
	if err := cp.cfg.Node.SetPool(ctx, cp.poolRequest(tpl, size)); err != nil {
		return nodeapi.PoolStatus{}, fmt.Errorf("set pool of %s: %w", name, err)
	}
	return cp.cfg.Node.Pool(ctx, tpl.ID)
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

// PoolStatus reports the warm pool of a template (by id); empty when the
// node cannot say.
func (cp *ControlPlane) PoolStatus(templateID string) nodeapi.PoolStatus {
	st, err := cp.cfg.Node.Pool(context.Background(), templateID)
	if err != nil {
		cp.log.Warn("pool status", "template", templateID, "err", err)
	}
	return st
}

// ApplyPools starts the warm pools: persisted sizes win over the given
// defaults (template name → size). Templates that are not ready yet are
// skipped; call again when they are.
func (cp *ControlPlane) ApplyPools(defaults map[string]int) {
	sizes := map[string]int{}
	for name, size := range defaults {
		sizes[name] = size
	}
	saved, err := store.All[poolSetting](cp.cfg.Store, poolBucket)
	if err != nil {
		cp.log.Error("load pool sizes", "err", err)
	}
	for _, p := range saved {
		sizes[p.Template] = p.Size
	}
	for name, size := range sizes {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, name)
		if err != nil {
			continue
		}
		if err := cp.cfg.Node.SetPool(context.Background(), cp.poolRequest(tpl, size)); err != nil {
			cp.log.Error("set pool", "template", name, "err", err)
		}
	}
}

// ForgetTemplate drops a deleted template's image and pool.
func (cp *ControlPlane) ForgetTemplate(name, templateID string) {
	ctx := context.Background()
	if err := cp.cfg.Node.SetPool(ctx, nodeapi.PoolRequest{Template: nodeapi.TemplateSpec{ID: templateID}}); err != nil {
		cp.log.Error("drain pool", "template", templateID, "err", err)
	}
	if err := cp.cfg.Node.DropTemplateImage(ctx, templateID); err != nil {
		cp.log.Error("drop template image", "template", templateID, "err", err)
	}
	_ = cp.cfg.Store.Delete(poolBucket, name)
}
