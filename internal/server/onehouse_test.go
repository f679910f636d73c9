package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

// serve and serve --one-house each refuse the other's embedded store
// instead of misreading it; a new store is either's.
func TestOneHouseAndServeRefuseEachOthersStore(t *testing.T) {
	open := func() store.Store {
		st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	fresh := open()
	if err := refuseServeState(fresh); err != nil {
		t.Fatalf("one house refuses a new store: %v", err)
	}
	if err := refuseOneHouseState(fresh); err != nil {
		t.Fatalf("serve refuses a new store: %v", err)
	}

	served := open()
	keys, err := auth.Open(served)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create("admin", project.Default, true); err != nil {
		t.Fatal(err)
	}
	if err := refuseServeState(served); err == nil || !strings.Contains(err.Error(), "without --one-house") {
		t.Fatalf("one house on serve's store: %v", err)
	}

	oneHouse := open()
	keys, err = auth.Open(oneHouse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadBootstrap(context.Background(), oneHouse, keys, "token", filepath.Join(t.TempDir(), "admin.key"), "", nil); err != nil {
		t.Fatal(err)
	}
	if err := refuseServeState(oneHouse); err != nil {
		t.Fatalf("one house refuses its own store: %v", err)
	}
	if err := refuseOneHouseState(oneHouse); err == nil || !strings.Contains(err.Error(), "with --one-house") {
		t.Fatalf("serve on one house's store: %v", err)
	}
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
