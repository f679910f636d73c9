package server

import (
	"errors"
	"fmt"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// catalog adapts the template manager to what the API and the control plane
// need of it.
type catalog struct {
	m  *template.Manager
	cp func() *controlplane.ControlPlane
}

func (c catalog) view(t *template.Template) apiv1.Template {
	pool := c.cp().PoolStatus(t.ID)
	return apiv1.Template{
		Name: t.Name, ID: t.ID, State: t.State, Reason: t.Reason, From: t.From,
		SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, ReadyAt: t.ReadyAt,
		Sandboxes: c.cp().CountUsing(t.ID),
		Pool:      &apiv1.PoolStatus{Size: pool.Size, Ready: pool.Ready},
	}
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

func (c catalog) Submit(name string, recipeYAML []byte, build api.TemplateBuild) (apiv1.Template, error) {
	r, err := template.ParseRecipe(recipeYAML)
	if err != nil {
		return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
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
	t, err := c.m.Submit(name, r, src)
	switch {
	case errors.Is(err, template.ErrHostPaths):
		return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrHostPathsForbidden, err)
	case err != nil:
		return apiv1.Template{}, fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	return c.view(t), nil
}

func (c catalog) Get(name string) (apiv1.Template, error) {
	t, err := c.m.Get(name)
	if err != nil {
		return apiv1.Template{}, mapTemplateErr(err)
	}
	return c.view(t), nil
}

func (c catalog) List() []apiv1.Template {
	out := []apiv1.Template{}
	for _, t := range c.m.List() {
		out = append(out, c.view(t))
	}
	return out
}

func (c catalog) Logs(name string, from int) ([]string, bool, error) {
	lines, done, err := c.m.Logs(name, from)
	return lines, done, mapTemplateErr(err)
}

func (c catalog) Delete(name string) error {
	t, err := c.m.Get(name)
	if err != nil {
		return mapTemplateErr(err)
	}
	if err := c.m.Delete(name, c.cp().InUse); err != nil {
		return mapTemplateErr(err)
	}
	c.cp().ForgetTemplate(t.Name, t.ID)
	return nil
}

func (c catalog) SetPool(name string, size int) (apiv1.Template, error) {
	if _, err := c.cp().SetPoolSize(name, size); err != nil {
		return apiv1.Template{}, err
	}
	return c.Get(name)
}

// Resolve implements controlplane.Templates.
func (c catalog) Resolve(nameOrID string) (node.TemplateSpec, string, error) {
	t, err := c.m.Get(nameOrID)
	if errors.Is(err, template.ErrNotFound) {
		return node.TemplateSpec{}, "", fmt.Errorf("template %q: %w", nameOrID, controlplane.ErrUnknownTemplate)
	}
	if err != nil {
		return node.TemplateSpec{}, "", err
	}
	if t.State != template.StateReady {
		return node.TemplateSpec{}, "", fmt.Errorf("template %q is %s: %w", nameOrID, t.State, controlplane.ErrTemplateNotReady)
	}
	return node.TemplateSpec{
		ID: t.ID, RootfsVolume: t.RootfsVolume, Env: t.Env, User: t.User, Workdir: t.Workdir,
		Start: t.Start, Ready: t.Ready,
	}, t.Name, nil
}
