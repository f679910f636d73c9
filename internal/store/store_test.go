package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestBolt(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		NewDB: func(t *testing.T) func() (store.Store, error) {
			path := filepath.Join(t.TempDir(), "state.db")
			return func() (store.Store, error) { return store.Open(path) }
		},
	})
}

func TestPostgres(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		NewDB: func(t *testing.T) func() (store.Store, error) {
			url := pgtest.Start(t)
			return func() (store.Store, error) { return store.OpenURL(context.Background(), url) }
		},
		Replicas: true,
	})
}
