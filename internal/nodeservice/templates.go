package nodeservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/template"
)

// A cluster builds a template once, on one node (nodeapi.Templates), and
// ships its root volume to the others (nodeapi.Transfer). The node that
// built it holds it in its template manager; the others hold only the
// read-only volume templates/<id>, which is all a create needs.

var _ nodeapi.Templates = Node{}

// BuildTemplate builds the recipe with the node's template manager, in a
// build sandbox of this node, and waits for it.
func (h Node) BuildTemplate(ctx context.Context, req nodeapi.TemplateBuildRequest, logs io.Writer) (nodeapi.TemplateBuilt, error) {
	r, err := template.ParseRecipe(req.Recipe)
	if err != nil {
		return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: %w", req.Name, err)
	}
	src := template.Source{HostPaths: req.HostPaths, DiskQuotaBytes: req.DiskQuotaBytes}
	if req.RegistryUsername != "" || req.RegistryPassword != "" {
		src.Registry = &template.RegistryAuth{Username: req.RegistryUsername, Password: req.RegistryPassword}
	}
	// The copy steps' archives were staged for this build alone (the
	// control plane keeps them): they go when it ends.
	for hash, handle := range req.CopyArchives {
		path, err := h.templates.StagedUpload(handle)
		if err != nil {
			return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: files %s: %w", req.Name, hash, err)
		}
		if src.Archives == nil {
			src.Archives = map[string]string{}
		}
		src.Archives[hash] = path
		defer os.Remove(path)
	}
	if req.Archive != "" {
		if src.Archive, err = h.templates.StagedUpload(req.Archive); err != nil {
			return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: %w", req.Name, err)
		}
	}
	t, err := h.templates.Build(ctx, req.Name, r, src, logs)
	if err != nil {
		return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: %w", req.Name, err)
	}
	return nodeapi.TemplateBuilt{Spec: t.Spec(), SizeBytes: t.SizeBytes}, nil
}

// StageTemplateArchive stages an uploaded archive with the template
// manager; the handle is its file's name, never its path.
func (h Node) StageTemplateArchive(ctx context.Context, r io.Reader, limit int64) (string, error) {
	path, err := h.templates.StageUpload(r, limit)
	switch {
	case errors.Is(err, template.ErrArchiveTooLarge):
		return "", err
	case err != nil:
		// The detail names the node's paths: the log has it, not the caller.
		h.log.Error("stage a template archive", "err", err)
		return "", errors.New("the node could not store the uploaded archive")
	}
	return filepath.Base(path), nil
}

// DiscardTemplateArchive removes a staged archive no build will consume.
func (h Node) DiscardTemplateArchive(ctx context.Context, handle string) error {
	if !template.ValidUploadHandle(handle) {
		return fmt.Errorf("discard template archive: %w: %q", nodeapi.ErrInvalidName, handle)
	}
	path, err := h.templates.StagedUpload(handle)
	if err != nil {
		return nil // consumed or discarded already
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Error("discard a staged template archive", "err", err)
		return errors.New("the node could not discard the staged archive")
	}
	return nil
}

// DeleteTemplate deletes a template the node built (its record and root
// volume) or received (its root volume), and its booted image. A template
// a built-in name points at stays: equal recipes share an id, and the
// built-in templates are the node's own.
func (h Node) DeleteTemplate(ctx context.Context, id string) error {
	if !isTemplateID(id) {
		return fmt.Errorf("delete template: %w: %q", nodeapi.ErrInvalidName, id)
	}
	m := h.templates
	for name, nid := range m.Names() {
		if _, builtin := template.Builtin(name); builtin && nid == id {
			return nil
		}
	}
	if err := h.Node.DropTemplateImage(ctx, id); err != nil {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	if _, err := m.Get(id); err == nil {
		if err := m.Delete(id, nil); err != nil && !errors.Is(err, template.ErrNotFound) {
			return fmt.Errorf("delete template %s: %w", id, err)
		}
		return nil
	}
	return h.Node.DeleteVolume(ctx, templateVolume(id))
}

// templateVolume is a template's root volume, as the manager names it.
func templateVolume(id string) string { return "templates/" + id }

// isTemplateID reports whether id is a template id (a hex content hash),
// which tells a template's root volume from its build and booted volumes.
func isTemplateID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// receivedTemplates are the ids of the template root volumes the node
// holds that its manager did not build: those shipped to it. A volume of
// a build still running (the manager's record is not ready) is not one.
func (h Node) receivedTemplates(ctx context.Context, held []string) ([]string, error) {
	vols, err := h.Node.Volumes(ctx, "templates")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vols {
		id := strings.TrimPrefix(v, "templates/")
		if !isTemplateID(id) || slices.Contains(held, id) {
			continue
		}
		if _, err := h.templates.Get(id); err == nil {
			continue // the manager's, not ready
		}
		ids = append(ids, id)
	}
	return ids, nil
}
