package upgrade

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/bootstrap"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
)

// serve's files become the bootstrap record's: its secrets key (so that
// its secrets still open), its egress CA (which its templates' ids cover)
// and its admin key, which every start writes to admin.key again.
func TestUpgradeSealsServesFiles(t *testing.T) {
	dir := t.TempDir()
	st := tempStore(t)
	keys, err := auth.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := bootstrap.MintAdminKey(keys, "admin", filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(st, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sec.Set("TOKEN", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	ca, err := credentials.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}

	seed, err := ServeSeed(dir, "", keys)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootstrap.Load(context.Background(), st, keys, "token", filepath.Join(dir, "admin.key"), "", seed)
	if err != nil {
		t.Fatal(err)
	}
	if b.AdminKey != admin || b.Created {
		t.Fatalf("admin key %q (made: %v), want serve's %q", b.AdminKey, b.Created, admin)
	}
	if b.EgressCA.Fingerprint() != ca.Fingerprint() {
		t.Fatal("the egress CA is not serve's")
	}
	opened, err := secrets.Open(st, b.SecretsKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := opened.Get("TOKEN"); err != nil || string(got) != "kept" {
		t.Fatalf("serve's secret after the upgrade: %q, %v", got, err)
	}

	// An admin.key the store does not know is no admin key.
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte("e2b_0000000000000000000000000000000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if seed, err := ServeSeed(dir, "", keys); err != nil || seed.AdminKey != "" {
		t.Fatalf("a stranger's admin.key was taken: %q, %v", seed.AdminKey, err)
	}
}

// One house tells a new store, serve's before it (which it upgrades) and
// its own apart.
func TestOneHouseTellsTheStoresApart(t *testing.T) {
	fresh := tempStore(t)
	if serve, err := IsServeStore(fresh); err != nil || serve {
		t.Fatalf("a new store is serve's: %v, %v", serve, err)
	}

	served := tempStore(t)
	keys, err := auth.Open(served)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create("admin", project.Default, true); err != nil {
		t.Fatal(err)
	}
	if serve, err := IsServeStore(served); err != nil || !serve {
		t.Fatalf("serve's store is not told as serve's: %v, %v", serve, err)
	}

	oneHouse := tempStore(t)
	keys, err = auth.Open(oneHouse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootstrap.Load(context.Background(), oneHouse, keys, "token", filepath.Join(t.TempDir(), "admin.key"), "", bootstrap.Seed{}); err != nil {
		t.Fatal(err)
	}
	if serve, err := IsServeStore(oneHouse); err != nil || serve {
		t.Fatalf("one house's store is told as serve's: %v, %v", serve, err)
	}
}

// tempStore is a store in a directory of its own, closed when t ends.
func tempStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
