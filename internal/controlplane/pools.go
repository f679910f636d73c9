package controlplane

import (
	"context"
	"fmt"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/node"
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
func (cp *ControlPlane) SetPoolSize(template string, size int) (node.PoolStatus, error) {
	if size < 0 || size > maxPoolSize {
		return node.PoolStatus{}, invalid("pool size must be between 0 and %d, got %d", maxPoolSize, size)
	}
	tpl, name, err := cp.cfg.Templates.Resolve(project.Everything, template)
	if err != nil {
		return node.PoolStatus{}, err
	}
	if err := cp.cfg.Store.Put(poolBucket, name, poolSetting{Template: name, Size: size}); err != nil {
		return node.PoolStatus{}, fmt.Errorf("persist pool size: %w", err)
	}
	d := cp.cfg.Defaults
	cp.cfg.Node.SetPoolSize(tpl, cp.poolLimits(d.VCPUs, d.MemoryMB, d.DiskMB), cp.defaultPolicy(), size)
	return cp.cfg.Node.PoolStatus(tpl.ID), nil
}

// defaultPolicy is the network policy of a create request that sets none,
// which pooled sandboxes wait under.
func (cp *ControlPlane) defaultPolicy() network.Policy {
	return Sandbox{Network: &NetworkPolicy{AllowInternet: true}, Traffic: cp.trafficOf(nil)}.policy()
}

// PoolStatus reports the warm pool of a template (by id).
func (cp *ControlPlane) PoolStatus(templateID string) node.PoolStatus {
	return cp.cfg.Node.PoolStatus(templateID)
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
	d := cp.cfg.Defaults
	for name, size := range sizes {
		tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, name)
		if err != nil {
			continue
		}
		cp.cfg.Node.SetPoolSize(tpl, cp.poolLimits(d.VCPUs, d.MemoryMB, d.DiskMB), cp.defaultPolicy(), size)
	}
}

// PrepareTemplate makes the template's pre-booted image now rather than at
// its first create.
func (cp *ControlPlane) PrepareTemplate(ctx context.Context, template string) error {
	tpl, _, err := cp.cfg.Templates.Resolve(project.Everything, template)
	if err != nil {
		return err
	}
	_, err = cp.cfg.Node.TemplateImage(ctx, tpl)
	return err
}

// ForgetTemplate drops a deleted template's image and pool.
func (cp *ControlPlane) ForgetTemplate(name, templateID string) {
	cp.cfg.Node.SetPoolSize(node.TemplateSpec{ID: templateID}, node.PoolLimits{}, network.Policy{}, 0)
	if err := cp.cfg.Node.DropTemplateImage(templateID); err != nil {
		cp.log.Error("drop template image", "template", templateID, "err", err)
	}
	_ = cp.cfg.Store.Delete(poolBucket, name)
}
