package e2b

import (
	"fmt"
	"net/http"
)

// deleteTemplate is E2B's DELETE /templates/{templateID}: a snapshot by
// its id (the SDK's Sandbox.deleteSnapshot), else a template the caller's
// project built, from code or natively, with its tags (E2B's CLI
// `template delete`). Another project's template, a built-in one and a
// missing one are 404 alike; one that sandboxes or pools use is 409.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.cfg.ControlPlane.ResolveSnapshot(scopeOf(r), snapshotRef(id)); err == nil || h.cfg.Templates == nil {
		h.deleteSnapshot(w, r)
		return
	}
	if err := h.cfg.Templates.Delete(scopeOf(r), id); err != nil {
		h.templateFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// scopedSnapshotOrTemplate confines /templates/{id} to the caller's
// snapshots and templates: another project's is not found, as a missing
// one.
func (h *Handler) scopedSnapshotOrTemplate(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if _, err := h.cfg.ControlPlane.ResolveSnapshot(scopeOf(r), snapshotRef(id)); err == nil {
			next(w, r)
			return
		}
		if h.cfg.Templates != nil && h.cfg.Templates.Owns(scopeOf(r), id) {
			next(w, r)
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("snapshot or template %q not found", id))
	}
}
