// Package upgrade is the one-time upgrade of a data dir that serve wrote
// before one house (issue #30, item 3). The store is the same one (keys,
// projects, quotas, sandboxes, snapshots, volumes, pools, secrets,
// events); what serve kept beside it in files, or read from its node
// directly, becomes records:
//
//   - the bootstrap record takes serve's secrets key, its egress CA (which
//     its templates trust and their ids cover) and its admin key
//     (ServeSeed);
//   - records naming serve's node "local" are on the node of the node-id
//     file (controlplane.LegacyLocalNode);
//   - a project's templates, which serve's catalog read from the node's
//     template manager by name, become the catalog's records, and E2B's
//     build records, JSON files under <data-dir>/e2b/builds, the store's
//     (ImportServeCatalog).
//
// Every step skips what is there already, and the last writes a marker,
// so that an import cut short by a crash is finished by the next start.
package upgrade

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/bootstrap"
	"github.com/space-platform/space/internal/catalog"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

const (
	upgradeBucket = "upgrade"
	// serveImportKey marks the import of serve's catalog as done.
	serveImportKey = "serve-catalog"
)

// IsServeStore reports whether st was written by serve before one house
// (74ed21b and older): it has keys but no bootstrap record.
func IsServeStore(st store.Store) (bool, error) {
	if made, err := bootstrap.Exists(st); err != nil || made {
		return false, err
	}
	keys, err := auth.Open(st)
	if err != nil {
		return false, err
	}
	return !keys.Empty(), nil
}

// ServeSeed reads what serve kept in files for the bootstrap record:
// the secrets key (keyFile, or <data-dir>/secrets.key), the egress CA
// (<data-dir>/ca) and the admin key (<data-dir>/admin.key, if the store
// knows it). What is missing is made as for a new installation.
func ServeSeed(dataDir, keyFile string, keys *auth.Keys) (bootstrap.Seed, error) {
	var seed bootstrap.Seed
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "secrets.key")
	}
	if _, err := os.Stat(keyFile); err == nil {
		if seed.SecretsKey, err = secrets.LoadOrCreateKey(keyFile); err != nil {
			return seed, err
		}
	}
	ca, err := credentials.LoadCA(filepath.Join(dataDir, "ca"))
	switch {
	case err == nil:
		seed.EgressCA = ca
	case !errors.Is(err, fs.ErrNotExist):
		return seed, err
	}
	if data, err := os.ReadFile(filepath.Join(dataDir, "admin.key")); err == nil {
		key := strings.TrimSpace(string(data))
		if k, err := keys.Check(key); err == nil && k.Admin {
			seed.AdminKey = key
		}
	}
	return seed, nil
}

// ImportServeCatalog makes the catalog's records of what serve's catalog
// kept on the node (m) and in <data-dir>/e2b/builds, unless done before.
// node is the id of the node that holds the templates.
func ImportServeCatalog(st store.Store, m *template.Manager, dataDir, node string) (templates, builds int, err error) {
	var done bool
	if err := st.Get(upgradeBucket, serveImportKey, &done); err == nil && done {
		return 0, 0, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, 0, fmt.Errorf("read the upgrade marker: %w", err)
	}
	if templates, err = catalog.ImportServeTemplates(st, m, node); err != nil {
		return 0, 0, err
	}
	if builds, err = catalog.ImportServeE2BBuilds(st, m.Get, filepath.Join(dataDir, "e2b", "builds")); err != nil {
		return 0, 0, err
	}
	if err := st.Put(upgradeBucket, serveImportKey, true); err != nil {
		return 0, 0, fmt.Errorf("write the upgrade marker: %w", err)
	}
	return templates, builds, nil
}
