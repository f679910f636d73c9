package controlplane

import (
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
)

// ResolveTemplate looks a template up as Create does (the scope's
// catalog; "" is the default template), for callers that need to know
// what it offers before creating from it, such as its MCP gateway.
func (cp *ControlPlane) ResolveTemplate(scope project.Scope, nameOrID string) (nodeapi.TemplateSpec, error) {
	if nameOrID == "" {
		nameOrID = cp.cfg.Defaults.Template
	}
	spec, _, err := cp.cfg.Templates.Resolve(scope, nameOrID)
	return spec, err
}
