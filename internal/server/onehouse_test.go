package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/bootstrap"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

// One house tells a new store, serve's before it (which it upgrades) and
// its own apart.
func TestOneHouseTellsTheStoresApart(t *testing.T) {
	fresh := tempStore(t)
	if serve, err := isServeStore(fresh); err != nil || serve {
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
	if serve, err := isServeStore(served); err != nil || !serve {
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
	if serve, err := isServeStore(oneHouse); err != nil || serve {
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

// The cluster token of a one-house serve is made once, private, and kept.
func TestClusterTokenMadeOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), clusterTokenFile)
	first, err := loadOrCreateClusterToken(path)
	if err != nil || len(first) != 64 {
		t.Fatalf("token %q, %v", first, err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", info, err)
	}
	again, err := loadOrCreateClusterToken(path)
	if err != nil || again != first {
		t.Fatalf("token changed: %q → %q (%v)", first, again, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateClusterToken(path); err == nil {
		t.Fatal("an empty token file was taken")
	}
}
