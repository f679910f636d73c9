package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

// The upgrade of a data dir that serve wrote before one house (issue #30,
// item 3). The store is the same one (keys, projects, quotas,
// sandboxes, snapshots, volumes, pools, secrets, events); what serve kept
// beside it in files, or read from its node directly, becomes records:
//
//   - the bootstrap record takes serve's secrets key, its egress CA (which
//     its templates trust and their ids cover) and its admin key
//     (serveSeed);
//   - records naming serve's node "local" are on the node of the node-id
//     file (controlplane.LegacyLocalNode);
//   - a project's templates, which serve's catalog read from the node's
//     template manager by name, become the catalog's records, and E2B's
//     build records, JSON files under <data-dir>/e2b/builds, the store's
//     (importServeCatalog).
//
// Every step skips what is there already, and the last writes a marker,
// so that an import cut short by a crash is finished by the next start.

const (
	upgradeBucket = "upgrade"
	// serveImportKey marks the import of serve's catalog as done.
	serveImportKey = "serve-catalog"
)

// isServeStore reports whether st was written by serve before one house
// (74ed21b and older): it has keys but no bootstrap record.
func isServeStore(st store.Store) (bool, error) {
	var rec bootstrapRecord
	err := st.Get(bootstrapBucket, bootstrapKey, &rec)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("read the bootstrap record: %w", err)
	}
	keys, err := auth.Open(st)
	if err != nil {
		return false, err
	}
	return !keys.Empty(), nil
}

// serveSeed reads what serve kept in files for the bootstrap record:
// the secrets key (keyFile, or <data-dir>/secrets.key), the egress CA
// (<data-dir>/ca) and the admin key (<data-dir>/admin.key, if the store
// knows it). What is missing is made as for a new installation.
func serveSeed(dataDir, keyFile string, keys *auth.Keys) (bootstrapSeed, error) {
	var seed bootstrapSeed
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "secrets.key")
	}
	if _, err := os.Stat(keyFile); err == nil {
		if seed.secretsKey, err = secrets.LoadOrCreateKey(keyFile); err != nil {
			return seed, err
		}
	}
	ca, err := credentials.LoadCA(filepath.Join(dataDir, "ca"))
	switch {
	case err == nil:
		seed.egressCA = ca
	case !errors.Is(err, fs.ErrNotExist):
		return seed, err
	}
	if data, err := os.ReadFile(filepath.Join(dataDir, "admin.key")); err == nil {
		key := strings.TrimSpace(string(data))
		if k, err := keys.Check(key); err == nil && k.Admin {
			seed.adminKey = key
		}
	}
	return seed, nil
}

// importServeCatalog makes the catalog's records of what serve's catalog
// kept on the node (m) and in <data-dir>/e2b/builds, unless done before.
// node is the id of the node that holds the templates.
func importServeCatalog(st store.Store, m *template.Manager, dataDir, node string) (templates, builds int, err error) {
	var done bool
	if err := st.Get(upgradeBucket, serveImportKey, &done); err == nil && done {
		return 0, 0, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, 0, fmt.Errorf("read the upgrade marker: %w", err)
	}
	if templates, err = importServeTemplates(st, m, node); err != nil {
		return 0, 0, err
	}
	if builds, err = importServeE2BBuilds(st, m.Get, filepath.Join(dataDir, "e2b", "builds")); err != nil {
		return 0, 0, err
	}
	if err := st.Put(upgradeBucket, serveImportKey, true); err != nil {
		return 0, 0, fmt.Errorf("write the upgrade marker: %w", err)
	}
	return templates, builds, nil
}

// importServeTemplates records every ready template the manager files
// under a project's name ("<project>/<name>", tags included), as held by
// node. Built-in templates need no record: the node reports them.
func importServeTemplates(st store.Store, m *template.Manager, node string) (int, error) {
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

// importServeE2BBuilds records serve's E2B build records (dir) as a
// cluster's: a build never triggered waits as it did; a triggered one
// ends as its template did (get: the node's template by id), and one cut
// short by the upgrade failed.
func importServeE2BBuilds(st store.Store, get func(id string) (*template.Template, error), dir string) (int, error) {
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
