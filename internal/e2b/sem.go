package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// TemplateLookup finds a template as a key's scope sees the catalog (its
// project's templates and the built-in ones); the server's catalog
// satisfies it. An unknown name is an error wrapping
// api.ErrTemplateNotFound.
type TemplateLookup interface {
	Get(scope project.Scope, name string) (apiv1.Template, error)
}

// templateAliasResponse is E2B's TemplateAliasResponse.
type templateAliasResponse struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// aliasPattern is what a template name may be: space's template names
// (lower case letters, digits, '-', '_', '.'), bounded.
var aliasPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// templateAlias is GET /templates/aliases/{alias}, what Template.exists()
// and Template.build() ask: 200 {templateID, public} for a template the
// key's project can start sandboxes from, 404 otherwise. Another
// project's template is a 404 like a missing one (E2B answers 403, which
// would tell a stranger the name is taken).
func (h *Handler) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	name, tag, tagged := strings.Cut(alias, ":")
	if !aliasPattern.MatchString(name) || tagged && !aliasPattern.MatchString(tag) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid alias format: %q is not a template name (lower case letters, digits, '.', '_' and '-', at most 128) with an optional :tag", alias))
		return
	}
	if h.cfg.Aliases == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", name))
		return
	}
	t, err := h.cfg.Aliases.Get(scopeOf(r), name)
	switch {
	case errors.Is(err, api.ErrTemplateNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", name))
		return
	case err != nil:
		h.fail(w, fmt.Errorf("look template %q up: %w", name, err))
		return
	}
	if tagged && tag != defaultTag {
		// Tags of templates built from code are catalog names of their own
		// (templates.go); other templates have only the default tag.
		if _, err := h.cfg.Aliases.Get(scopeOf(r), alias); err == nil {
			tagged = false
		}
	}
	if tagged && tag != defaultTag {
		writeError(w, http.StatusNotFound, fmt.Sprintf("tag '%s' does not exist for template '%s'", tag, name))
		return
	}
	writeJSON(w, http.StatusOK, templateAliasResponse{
		TemplateID: strings.TrimPrefix(t.Name, t.Project+"/"),
		Public:     t.Builtin,
	})
}
