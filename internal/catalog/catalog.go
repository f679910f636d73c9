// Package catalog is the control plane's template catalog: it resolves
// a template name to what the nodes hold, builds templates through the
// nodes (one node builds, the others receive the root volume), and keeps
// E2B's template-build API state, all in the control plane's store so
// that every replica answers alike.
package catalog

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// nodeTemplatesBucket holds, by node id, the templates each node reported
// ready (cpapi.Template), so that every replica resolves them.
const nodeTemplatesBucket = "node_templates"

// errBuiltinDelete refuses deleting a built-in template (409): every
// node builds the built-ins at its start, so a delete would not last.
var errBuiltinDelete = fmt.Errorf("%w: the built-in templates are built by every node at its start (space node and space serve --build-templates choose which); a built-in cannot be deleted", api.ErrTemplateBuiltin)

// Catalog is the template catalog of a control plane (a cluster's, or
// one house's): the built-in templates the nodes reported, by name, and
// the templates built through the control plane (builds.go). A template is ready
// when at least one schedulable node holds it; the id is the same on
// every node (a hash of the recipe and the builder), so placement finds
// the nodes that hold it by id.
type Catalog struct {
	st     store.Store
	reg    *cluster.Registry
	cp     func() *controlplane.ControlPlane
	builds buildQueue
	// buildLimits and buildDisk size a build's place on a node.
	buildLimits runtime.Limits
	buildDisk   int64
	// quotas bound each project's templates (templatedisk.go); nil:
	// unbounded.
	quotas ProjectQuotas
	// registryReadCache is how old reg's copy of the nodes may be.
	registryReadCache time.Duration

	mu sync.Mutex
	// written is what this replica last stored per node, so that
	// heartbeats write only changes.
	written map[string][]cpapi.Template
}

// Config is what a catalog is made of.
type Config struct {
	// Store holds the catalog's records, shared by every replica.
	Store    store.Store
	Registry *cluster.Registry
	// ControlPlane is the control plane whose sandboxes and pools use
	// the templates: nil until it is built (the control plane resolves
	// templates through the catalog, so the catalog comes first), and
	// in tests.
	ControlPlane func() *controlplane.ControlPlane
	// BuildLimits and BuildDiskBytes are the size of a build sandbox,
	// which a build needs free on the node it is placed on.
	BuildLimits    runtime.Limits
	BuildDiskBytes int64
	// Quotas are the projects' quotas, of which the catalog enforces
	// max_template_disk_mb; nil: no project quota.
	Quotas ProjectQuotas
	// RegistryReadCache is how old Registry's copy of the nodes may be
	// (cluster.Config.ReadCacheTTL): an E2B build reports ready only once
	// every replica's copy can hold its template.
	RegistryReadCache time.Duration
}

// New makes the catalog of cfg; it builds once StartBuilds gave it the
// nodes.
func New(cfg Config) *Catalog {
	cp := cfg.ControlPlane
	if cp == nil {
		cp = func() *controlplane.ControlPlane { return nil }
	}
	return &Catalog{
		st: cfg.Store, reg: cfg.Registry, cp: cp,
		buildLimits: cfg.BuildLimits, buildDisk: cfg.BuildDiskBytes, quotas: cfg.Quotas, registryReadCache: cfg.RegistryReadCache,
		written: map[string][]cpapi.Template{},
	}
}

// Record stores the templates a node reported, when they changed (as
// this replica last wrote them), and says whether they did.
func (c *Catalog) Record(nodeID string, ts []cpapi.Template) (changed bool, err error) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.written[nodeID]; ok && reflect.DeepEqual(prev, ts) {
		return false, nil
	}
	if err := c.st.Put(nodeTemplatesBucket, nodeID, ts); err != nil {
		return false, fmt.Errorf("record the templates of node %s: %w", nodeID, err)
	}
	c.written[nodeID] = ts
	return true, nil
}

// builtinTemplate is one template as the cluster holds it.
type builtinTemplate struct {
	name string
	spec nodeapi.TemplateSpec
	// sizeBytes, createdAt and readyAt are the first reporting node's.
	sizeBytes int64
	createdAt time.Time
	readyAt   *time.Time
	// ready counts the schedulable nodes that hold it, nodes all that do.
	ready, nodes int
}

// templates reads what the nodes hold, by name; of two ids under one name
// (nodes of different builders) the one more schedulable nodes hold wins.
func (c *Catalog) templates() (map[string]builtinTemplate, error) {
	nodes, err := c.reg.List()
	if err != nil {
		return nil, err
	}
	byID := map[string]cluster.Node{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	type key struct{ name, id string }
	found := map[key]*builtinTemplate{}
	err = c.st.Each(nodeTemplatesBucket, func(nodeID string, data []byte) error {
		n, ok := byID[nodeID]
		if !ok {
			return nil // removed
		}
		var ts []cpapi.Template
		if err := json.Unmarshal(data, &ts); err != nil {
			return fmt.Errorf("decode the templates of node %s: %w", nodeID, err)
		}
		for _, t := range ts {
			k := key{t.Name, t.Spec.ID}
			ct := found[k]
			if ct == nil {
				ct = &builtinTemplate{name: t.Name, spec: t.Spec, sizeBytes: t.SizeBytes, createdAt: t.CreatedAt, readyAt: t.ReadyAt}
				found[k] = ct
			}
			ct.nodes++
			// Held by its last heartbeat, not only reported once.
			if n.Schedulable() && slices.Contains(n.Info.Templates, t.Spec.ID) {
				ct.ready++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]builtinTemplate{}
	for _, ct := range found {
		if prev, ok := out[ct.name]; !ok || ct.ready > prev.ready || ct.ready == prev.ready && ct.nodes > prev.nodes {
			out[ct.name] = *ct
		}
	}
	return out, nil
}

// lookup finds a template by name or id.
func (c *Catalog) lookup(nameOrID string) (builtinTemplate, bool, error) {
	all, err := c.templates()
	if err != nil {
		return builtinTemplate{}, false, err
	}
	if t, ok := all[nameOrID]; ok {
		return t, true, nil
	}
	for _, t := range all {
		if t.spec.ID == nameOrID {
			return t, true, nil
		}
	}
	return builtinTemplate{}, false, nil
}

// Resolve implements controlplane.Templates.
func (c *Catalog) Resolve(scope project.Scope, nameOrID string) (nodeapi.TemplateSpec, string, error) {
	if b, ok, err := c.lookupBuilt(scope, nameOrID); err != nil {
		return nodeapi.TemplateSpec{}, "", err
	} else if ok {
		if state, reason := c.builtState(b); state != template.StateReady {
			if reason == "" {
				reason = state
			}
			return nodeapi.TemplateSpec{}, "", fmt.Errorf("template %q is not ready (%s): %w", nameOrID, reason, controlplane.ErrTemplateNotReady)
		}
		return b.Spec, b.canonical(), nil
	}
	t, ok, err := c.lookup(nameOrID)
	switch {
	case err != nil:
		return nodeapi.TemplateSpec{}, "", err
	case !ok:
		if _, builtin := template.Builtin(nameOrID); builtin {
			return nodeapi.TemplateSpec{}, "", fmt.Errorf("template %q is not built on any node yet: %w", nameOrID, controlplane.ErrTemplateNotReady)
		}
		return nodeapi.TemplateSpec{}, "", fmt.Errorf("template %q: %w", nameOrID, controlplane.ErrUnknownTemplate)
	case t.ready == 0:
		return nodeapi.TemplateSpec{}, "", fmt.Errorf("template %q is on no schedulable node: %w", nameOrID, controlplane.ErrTemplateNotReady)
	}
	return t.spec, t.name, nil
}

func (c *Catalog) view(scope project.Scope, t builtinTemplate) apiv1.Template {
	v := apiv1.Template{Name: t.name, Builtin: true, ID: t.spec.ID, State: template.StateReady,
		SizeBytes: t.sizeBytes, CreatedAt: t.createdAt, ReadyAt: t.readyAt}
	v.SetRuntimes(t.spec.Runtimes)
	if t.ready == 0 {
		v.State, v.Reason = template.StateBuilding, "held by no schedulable node"
	}
	if recipe, ok := template.Builtin(t.name); ok {
		v.From = recipe.From
	}
	if cp := c.cp(); cp != nil {
		pool := cp.PoolStatus(t.spec.ID)
		v.Sandboxes = cp.CountUsing(scope, t.spec.ID)
		v.Pool = &apiv1.PoolStatus{Size: pool.Size, Ready: pool.Ready}
	}
	return v
}

// Get implements api.Templates.
func (c *Catalog) Get(scope project.Scope, name string) (apiv1.Template, error) {
	if b, ok, err := c.lookupBuilt(scope, name); err != nil {
		return apiv1.Template{}, err
	} else if ok {
		return c.viewBuilt(scope, b), nil
	}
	t, ok, err := c.lookup(name)
	if err != nil {
		return apiv1.Template{}, err
	}
	if !ok || strings.Contains(name, "/") {
		return apiv1.Template{}, fmt.Errorf("%w: template %q is on no node", api.ErrTemplateNotFound, name)
	}
	return c.view(scope, t), nil
}

// List implements api.Templates: the built-in templates and those built
// through the catalog that scope sees, tags left out.
func (c *Catalog) List(scope project.Scope) []apiv1.Template {
	all, err := c.templates()
	out := []apiv1.Template{}
	if err != nil {
		return out
	}
	for _, t := range all {
		out = append(out, c.view(scope, t))
	}
	built, _ := c.built()
	for _, b := range built {
		if scope.Sees(b.Project) && !strings.Contains(b.Name, ":") { // a tag is no template of its own
			out = append(out, c.viewBuilt(scope, b))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Project < out[j].Project
	})
	return out
}

// Logs has the stored log of a template built through the cluster, and no
// lines for a built-in one: its builds ran on the nodes at their start,
// whose logs hold them.
func (c *Catalog) Logs(scope project.Scope, name string, from int) ([]string, bool, error) {
	if b, ok, err := c.lookupBuilt(scope, name); err != nil {
		return nil, false, err
	} else if ok {
		return c.logsBuilt(b, from)
	}
	if _, err := c.Get(scope, name); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// Submit builds a template once, on one node, and ships it to the others.
func (c *Catalog) Submit(scope project.Scope, name string, recipe []byte, build api.TemplateBuild) (apiv1.Template, error) {
	return c.submitBuilt(scope, name, recipe, build)
}

// Delete deletes a template built through the cluster, refused while
// sandboxes use it.
func (c *Catalog) Delete(scope project.Scope, name string) error {
	b, ok, err := c.lookupBuilt(scope, name)
	if err != nil {
		return err
	}
	if ok {
		return c.deleteTagged(b)
	}
	if _, ok, err := c.lookup(name); err != nil {
		return err
	} else if !ok || strings.Contains(name, "/") {
		return fmt.Errorf("%w: template %q", api.ErrTemplateNotFound, name)
	}
	if !scope.All {
		return errShared(name)
	}
	return errBuiltinDelete
}

// deleteTagged deletes a template built through the cluster and its
// E2B tags ("<name>:<tag>" records, which would otherwise keep the
// template's volumes as another name for them); the tags come back if
// the delete is refused.
func (c *Catalog) deleteTagged(b builtTemplate) error {
	if strings.Contains(b.Name, ":") {
		return c.deleteBuilt(b)
	}
	all, err := c.built()
	if err != nil {
		return err
	}
	var tags []builtTemplate
	for _, o := range all {
		if o.Project == b.Project && strings.HasPrefix(o.Name, b.Name+":") {
			tags = append(tags, o)
			if err := c.st.Delete(templatesBucket, o.canonical()); err != nil {
				return fmt.Errorf("delete tag %s: %w", o.Name, err)
			}
		}
	}
	if err := c.deleteBuilt(b); err != nil {
		for _, o := range tags {
			_ = c.st.Put(templatesBucket, o.canonical(), o)
		}
		return err
	}
	return nil
}

// SetPool sets a template's warm pool size; a built-in template's only
// with an admin scope, as every project shares it.
func (c *Catalog) SetPool(scope project.Scope, name string, size int) (apiv1.Template, error) {
	if b, ok, err := c.lookupBuilt(scope, name); err != nil {
		return apiv1.Template{}, err
	} else if ok {
		if _, err := c.cp().SetPoolSize(b.canonical(), size); err != nil {
			return apiv1.Template{}, err
		}
		return c.Get(scope, name)
	}
	t, ok, err := c.lookup(name)
	if err != nil {
		return apiv1.Template{}, err
	}
	if !ok {
		return apiv1.Template{}, fmt.Errorf("%w: template %q is on no node", api.ErrTemplateNotFound, name)
	}
	if !scope.All {
		return apiv1.Template{}, errShared(name)
	}
	if _, err := c.cp().SetPoolSize(t.name, size); err != nil {
		return apiv1.Template{}, err
	}
	return c.Get(scope, name)
}
