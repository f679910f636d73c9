package catalog

import (
	"fmt"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
)

// A project's built templates hold node disk, on every node they are
// shipped to: the sum of their sizes is charged to the project and
// bounded by its quota's max_template_disk_mb.

// ProjectQuotas gives a project's effective quota; *project.Quotas
// satisfies it.
type ProjectQuotas interface {
	Of(project string) project.Quota
}

// templateDiskUsed sums the sizes of project p's built templates, each
// template id once (an E2B tag is another name for a template, not more
// disk), leaving out the record under key, which the build being
// admitted replaces.
func (c *Catalog) templateDiskUsed(p, key string) (int64, error) {
	all, err := c.built()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	var used int64
	for _, b := range all {
		if project.Of(b.Project) != project.Of(p) || b.canonical() == key || b.State != template.StateReady || seen[b.Spec.ID] {
			continue
		}
		seen[b.Spec.ID] = true
		used += b.SizeBytes
	}
	return used, nil
}

// DiskUsed implements api.Templates: what project p's built templates
// hold.
func (c *Catalog) DiskUsed(p string) (int64, error) { return c.templateDiskUsed(p, "") }

// templateDiskLeft is what project p may still fill with a build that
// replaces the record under key: 0 when its quota is unlimited, a
// QuotaError (429) when nothing is left. Concurrent builds of one project
// each get what is left when they are admitted.
func (c *Catalog) templateDiskLeft(p, key string) (int64, error) {
	if c.quotas == nil {
		return 0, nil
	}
	limitMB := c.quotas.Of(p).MaxTemplateDiskMB
	if limitMB <= 0 {
		return 0, nil
	}
	used, err := c.templateDiskUsed(p, key)
	if err != nil {
		return 0, fmt.Errorf("count the template disk of project %s: %w", project.Of(p), err)
	}
	limit := int64(limitMB) << 20
	if used >= limit {
		return 0, &controlplane.QuotaError{Project: project.Of(p), Message: fmt.Sprintf(
			"the project's templates hold %d MiB of its %d MiB of template disk; delete one first", used>>20, limitMB)}
	}
	return limit - used, nil
}
