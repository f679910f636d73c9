package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

// The catalog's part of the upgrade of a data dir that serve wrote before
// one house (internal/upgrade runs it once): what serve's catalog read
// from its node's template manager and from JSON files becomes the
// catalog's records.

// ImportServeTemplates records every ready template the manager files
// under a project's name ("<project>/<name>", tags included), as held by
// node. Built-in templates need no record: the node reports them.
func ImportServeTemplates(st store.Store, m *template.Manager, node string) (int, error) {
	n := 0
	for name, id := range m.Names() {
		owner, short := ownerOf(name)
		if owner == "" {
			continue
		}
		t, err := m.Get(id)
		if err != nil || t.State != template.StateReady {
			continue
		}
		key := owner + "/" + short
		var prev builtTemplate
		if err := st.Get(templatesBucket, key, &prev); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return n, fmt.Errorf("import template %s: %w", key, err)
		}
		rec := builtTemplate{
			Project: owner, Name: short, Spec: t.Spec(), State: template.StateReady, From: t.From,
			SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, ReadyAt: t.ReadyAt, Node: node,
		}
		if err := st.Put(templatesBucket, key, rec); err != nil {
			return n, fmt.Errorf("import template %s: %w", key, err)
		}
		n++
	}
	return n, nil
}

// ImportServeE2BBuilds records serve's E2B build records (dir) as a
// cluster's: a build never triggered waits as it did; a triggered one
// ends as its template did (get: the node's template by id), and one cut
// short by the upgrade failed.
func ImportServeE2BBuilds(st store.Store, get func(id string) (*template.Template, error), dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("import e2b builds: %w", err)
	}
	n := 0
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return n, fmt.Errorf("import e2b builds: %w", err)
		}
		var b e2b.TemplateBuild
		if err := json.Unmarshal(data, &b); err != nil || b.ID+".json" != e.Name() {
			continue // a torn write of a build never started, as serve read them
		}
		var prev e2bBuild
		if err := st.Get(e2bBuildsBucket, b.ID, &prev); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return n, fmt.Errorf("import e2b build %s: %w", b.ID, err)
		}
		rec := e2bBuild{TemplateBuild: b}
		if b.TemplateID != "" {
			rec.Ended = time.Now().UTC()
			var built builtTemplate
			if err := st.Get(templatesBucket, b.Project+"/"+b.Name, &built); err == nil {
				rec.Started = built.CreatedAt
			}
			switch t, err := get(b.TemplateID); {
			case err != nil:
				rec.State, rec.Reason = template.StateFailed, "its template is gone"
			case t.State == template.StateBuilding:
				rec.State, rec.Reason = template.StateFailed, "cut short by the upgrade of the server"
			default:
				rec.State, rec.Reason = t.State, t.Reason
			}
		}
		if err := st.Put(e2bBuildsBucket, b.ID, rec); err != nil {
			return n, fmt.Errorf("import e2b build %s: %w", b.ID, err)
		}
		n++
	}
	return n, nil
}

// ownerOf splits a name serve's template manager filed a template under
// into its project and its name; a built-in template's has no project.
func ownerOf(catalogName string) (owner, name string) {
	if p, n, ok := strings.Cut(catalogName, "/"); ok {
		return p, n
	}
	return "", catalogName
}
