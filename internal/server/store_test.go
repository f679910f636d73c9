package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// --store picks the state store: a postgres:// URL is PostgreSQL, empty
// is <data-dir>/state.db. ResetAdminKey opens the store as Start does.
func TestResetAdminKeyOnEitherStore(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Start(t)
	for _, tc := range []struct{ name, url string }{{"bbolt", ""}, {"postgres", url}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.url == "" {
				if _, err := ResetAdminKey(ctx, dir, ""); err == nil || !strings.Contains(err.Error(), "no space state") {
					t.Fatalf("reset without state.db: err = %v", err)
				}
				st, err := openStore(ctx, dir, "")
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			key, err := ResetAdminKey(ctx, dir, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if file, err := os.ReadFile(filepath.Join(dir, "admin.key")); err != nil || strings.TrimSpace(string(file)) != key {
				t.Fatalf("admin.key = %q, %v; want the minted key", file, err)
			}
			st, err := openStore(ctx, dir, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			keys, err := auth.Open(st)
			if err != nil {
				t.Fatal(err)
			}
			if k, err := keys.Check(key); err != nil || !k.Admin {
				t.Fatalf("minted key in the store: %+v, %v", k, err)
			}
			if tc.url != "" {
				if _, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
					t.Fatal("a postgres store left a state.db in the data dir")
				}
			}
		})
	}
	// The same URL opened through store.OpenURL sees the key: it is in
	// PostgreSQL, not in a file.
	st, err := store.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if keys, err := auth.Open(st); err != nil || keys.Empty() {
		t.Fatalf("keys in postgres: empty=%v, %v", keys != nil && keys.Empty(), err)
	}
}
