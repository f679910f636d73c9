package server

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// catalog adapts the template manager to what the API and the control plane
// need of it, per project.
//
// The manager files templates under catalog names: built-in templates (the
// server's own builds, `space template build` on the host) under their bare
// name, a project's templates under "<project>/<name>". A caller sees the
// built-in templates and its project's; it names its own without the
// prefix. Two projects building the same recipe share its rootfs (the ID
// is a content hash) through two names, and deleting one name keeps the
// rootfs while the other points at it.
type catalog struct {
	m  *template.Manager
	cp func() *controlplane.ControlPlane
}

// entry is one template as a scope sees it.
type entry struct {
	t *template.Template
	// canonical is the catalog name (or, for a version reached by ID only,
	// the ID); owner is the owning project, "" for a built-in template;
	// display is the name the caller knows it by.
	canonical, owner, display string
}

func ownerOf(catalogName string) (owner, name string) {
	if p, n, ok := strings.Cut(catalogName, "/"); ok {
		return p, n
	}
	return "", catalogName
}

// lookup finds nameOrID as scope sees the catalog. A template the scope
// does not see is not found, with the message of a missing one.
func (c catalog) lookup(scope project.Scope, nameOrID string) (entry, error) {
	missing := fmt.Errorf("template %q: %w", nameOrID, template.ErrNotFound)
	if strings.Contains(nameOrID, "/") {
		// "<project>/<name>" addresses another project's template: admin only.
		owner, name := ownerOf(nameOrID)
		if !scope.Sees(owner) || name == "" {
			return entry{}, missing
		}
		t, err := c.m.Get(nameOrID)
		if err != nil {
			return entry{}, missing
		}
		return entry{t: t, canonical: nameOrID, owner: owner, display: name}, nil
	}
	if t, err := c.m.Get(scope.Owner() + "/" + nameOrID); err == nil {
		return entry{t: t, canonical: scope.Owner() + "/" + nameOrID, owner: scope.Owner(), display: nameOrID}, nil
	}
	names := c.m.Names()
	if id, ok := names[nameOrID]; ok {
		t, err := c.m.Get(id)
		if err != nil {
			return entry{}, missing
		}
		return entry{t: t, canonical: nameOrID, display: nameOrID}, nil
	}
	t, err := c.m.Get(nameOrID)
	if err != nil || t.ID != nameOrID {
		return entry{}, missing
	}
	// By ID: visible through a name the scope sees (its own first), or
	// as an older version built under one.
	var seen []string
	for name, id := range names {
		if owner, _ := ownerOf(name); id == t.ID && (owner == "" || scope.Sees(owner)) {
			seen = append(seen, name)
		}
	}
	for _, name := range seen {
		if owner, short := ownerOf(name); owner == scope.Owner() {
			return entry{t: t, canonical: t.ID, owner: owner, display: short}, nil
		}
	}
	if len(seen) > 0 {
		owner, short := ownerOf(seen[0])
		return entry{t: t, canonical: t.ID, owner: owner, display: short}, nil
	}
	if owner, short := ownerOf(t.Name); owner == "" || scope.Sees(owner) {
		return entry{t: t, canonical: t.ID, owner: owner, display: short}, nil
	}
	return entry{}, missing
}

func (c catalog) view(scope project.Scope, e entry) apiv1.Template {
	t := e.t
	pool := c.cp().PoolStatus(t.ID)
	from := t.From
	if parent, ok := strings.CutPrefix(from, template.FromTemplate+":"); ok {
		if _, builtin := c.m.Names()[parent]; !builtin || strings.Contains(parent, "/") {
			from = template.FromTemplate + ":" + t.ParentID // the parent may be another project's
		}
	}
	v := apiv1.Template{
		Name: e.display, Project: e.owner, Builtin: e.owner == "",
		ID: t.ID, State: t.State, Reason: c.scrub(e, t.Reason), From: from,
		SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, ReadyAt: t.ReadyAt,
		Sandboxes: c.cp().CountUsing(scope, t.ID),
		Pool:      &apiv1.PoolStatus{Size: pool.Size, Ready: pool.Ready},
	}
	v.SetRuntimes(t.Runtimes)
	return v
}

// scrub replaces the catalog name the version was first built under (which
// may be another project's) with the name the caller knows it by.
func (c catalog) scrub(e entry, line string) string {
	if e.t.Name == "" || e.t.Name == e.canonical {
		return line
	}
	return strings.ReplaceAll(line, e.t.Name, e.display)
}

func mapTemplateErr(err error) error {
	switch {
	case errors.Is(err, template.ErrNotFound):
		return fmt.Errorf("%w: %v", api.ErrTemplateNotFound, err)
	case errors.Is(err, template.ErrInUse):
		return fmt.Errorf("%w: %v", api.ErrTemplateInUse, err)
	}
	return err
}

// parseSubmitted parses a recipe sent over the API and names it: name,
// or the recipe's own when empty.
func parseSubmitted(name string, recipeYAML []byte) (*template.Recipe, string, error) {
	r, err := template.ParseRecipe(recipeYAML)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	if name == "" {
		name = r.Name
	}
	if err := template.ValidName(name); err != nil {
		return nil, "", fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	return r, name, nil
}

func (c catalog) Submit(scope project.Scope, name string, recipeYAML []byte, build api.TemplateBuild) (apiv1.Template, error) {
	r, name, err := parseSubmitted(name, recipeYAML)
	if err != nil {
		return apiv1.Template{}, err
	}
	// Recipes posted over the API have no directory of their own, so
	// relative file sources are refused by the manager's validation.
	src := template.Source{HostPaths: build.Admin}
	if build.Archive != nil {
		if src.Archive, err = c.m.StageUpload(build.Archive, build.ArchiveLimit); err != nil {
			if errors.Is(err, template.ErrArchiveTooLarge) {
				return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrArchiveTooLarge, err)
			}
			return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
		}
	}
	return c.submit(scope, name, r, src)
}

// submit builds a parsed recipe as the scope's template name.
func (c catalog) submit(scope project.Scope, name string, r *template.Recipe, src template.Source) (apiv1.Template, error) {
	if _, builtin := c.m.Names()[name]; builtin {
		if src.Archive != "" {
			_ = os.Remove(src.Archive)
		}
		return apiv1.Template{}, fmt.Errorf("%w: the name %s belongs to a built-in template; choose another", api.ErrBadRecipe, name)
	}
	// A parent template is one this project sees; a project's own is
	// named by ID, since the manager looks bare names up among the
	// built-in templates only.
	if base, err := template.ParseFrom(r.From); err == nil && base.Kind == template.FromTemplate {
		parent, err := c.lookup(scope, base.Arg)
		if err != nil {
			if src.Archive != "" {
				_ = os.Remove(src.Archive)
			}
			return apiv1.Template{}, fmt.Errorf("%w: from: %v", api.ErrBadRecipe, err)
		}
		if parent.owner != "" || parent.canonical != base.Arg {
			r.From = template.FromTemplate + ":" + parent.t.ID
		}
	}
	canonical := scope.Owner() + "/" + name
	t, err := c.m.SubmitAs(canonical, name, r, src)
	switch {
	case errors.Is(err, template.ErrHostPaths):
		// The build's message already says why and what to do instead;
		// %.0w wraps api's sentinel (403) without repeating its text.
		return apiv1.Template{}, fmt.Errorf("%w%.0w", err, api.ErrHostPathsForbidden)
	case err != nil:
		return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	return c.view(scope, entry{t: t, canonical: canonical, owner: scope.Owner(), display: name}), nil
}

func (c catalog) Get(scope project.Scope, name string) (apiv1.Template, error) {
	e, err := c.lookup(scope, name)
	if err != nil {
		return apiv1.Template{}, mapTemplateErr(err)
	}
	return c.view(scope, e), nil
}

// List returns the latest template of every name the scope sees: the
// built-in ones and its project's (every project's for an admin scope).
func (c catalog) List(scope project.Scope) []apiv1.Template {
	out := []apiv1.Template{}
	for _, t := range c.m.List() {
		if strings.Contains(t.Name, ":") {
			continue // a tag (E2B's name:tag), not a template of its own
		}
		owner, short := ownerOf(t.Name)
		if owner != "" && !scope.Sees(owner) {
			continue
		}
		out = append(out, c.view(scope, entry{t: t, canonical: t.Name, owner: owner, display: short}))
	}
	return out
}

func (c catalog) Logs(scope project.Scope, name string, from int) ([]string, bool, error) {
	e, err := c.lookup(scope, name)
	if err != nil {
		return nil, false, mapTemplateErr(err)
	}
	rec, err := c.m.Get(e.t.ID) // the record keeps the first builder's name
	if err == nil {
		e.t = rec
	}
	lines, done, err := c.m.Logs(e.t.ID, from)
	for i := range lines {
		lines[i] = c.scrub(e, lines[i])
	}
	return lines, done, mapTemplateErr(err)
}

// errShared refuses a change to a built-in template from a non-admin key.
func errShared(name string) error {
	return fmt.Errorf("%w: %s is a built-in template shared by every project; only an admin key may change it", api.ErrTemplateShared, name)
}

func (c catalog) Delete(scope project.Scope, name string) error {
	e, err := c.lookup(scope, name)
	if err != nil {
		return mapTemplateErr(err)
	}
	if e.owner == "" && !scope.All {
		return errShared(name)
	}
	// Other names (another project's build of the same recipe) keep the
	// rootfs; then only this project's sandboxes stand in the way.
	shared := false
	for other, id := range c.m.Names() {
		if id == e.t.ID && other != e.canonical && !strings.HasPrefix(other, e.canonical+":") {
			shared = true
		}
	}
	owner := project.In(e.owner)
	inUse := func(id string) bool {
		if shared && id == e.t.ID {
			return c.cp().CountUsing(owner, id) > 0
		}
		return c.cp().InUse(id)
	}
	// E2B's tags of the name ("<name>:<tag>") go with it, so that the
	// versions only they held are deleted too; they come back if the
	// delete is refused.
	tags := map[string]string{}
	for other, id := range c.m.Names() {
		if strings.HasPrefix(other, e.canonical+":") {
			tags[other] = id
			_ = c.m.Unpoint(other)
		}
	}
	if err := c.m.Delete(e.canonical, inUse); err != nil {
		for tag, id := range tags {
			_ = c.m.Point(tag, id)
		}
		return mapTemplateErr(err)
	}
	if !shared {
		c.cp().ForgetTemplate(e.canonical, e.t.ID)
	}
	return nil
}

func (c catalog) SetPool(scope project.Scope, name string, size int) (apiv1.Template, error) {
	e, err := c.lookup(scope, name)
	if err != nil {
		return apiv1.Template{}, mapTemplateErr(err)
	}
	if e.owner == "" && !scope.All {
		return apiv1.Template{}, errShared(name)
	}
	if _, err := c.cp().SetPoolSize(e.canonical, size); err != nil {
		return apiv1.Template{}, err
	}
	return c.Get(scope, name)
}

// Resolve implements controlplane.Templates; the name it returns is the
// catalog name, which pools and recovery look up with project.Everything.
func (c catalog) Resolve(scope project.Scope, nameOrID string) (node.TemplateSpec, string, error) {
	e, err := c.lookup(scope, nameOrID)
	if errors.Is(err, template.ErrNotFound) {
		return node.TemplateSpec{}, "", fmt.Errorf("template %q: %w", nameOrID, controlplane.ErrUnknownTemplate)
	}
	if err != nil {
		return node.TemplateSpec{}, "", err
	}
	t := e.t
	if t.State != template.StateReady {
		return node.TemplateSpec{}, "", fmt.Errorf("template %q is %s: %w", nameOrID, t.State, controlplane.ErrTemplateNotReady)
	}
	name := e.canonical
	if name == t.ID {
		name = e.display
		if e.owner != "" {
			name = e.owner + "/" + e.display
		}
	}
	return templateSpec(t), name, nil
}
