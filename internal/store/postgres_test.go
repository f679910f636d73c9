package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/store"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return c
}

// The migrations under migrations/ are applied once each, in order, even by
// replicas opening a fresh database at the same moment.
func TestPostgresMigrations(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Start(t)
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	var want []string
	for _, f := range files {
		want = append(want, strings.TrimSuffix(filepath.Base(f), ".sql"))
	}

	// Two replicas start together on an empty database.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := store.OpenURL(ctx, url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}

	applied := func() []string {
		rows, err := connect(t, url).Query(ctx, `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var v int
			var name string
			var at time.Time
			if err := rows.Scan(&v, &name, &at); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(name, fmt.Sprintf("%04d_", v)) {
				t.Errorf("migration %q recorded as version %d", name, v)
			}
			out = append(out, fmt.Sprint(name, "@", at.UnixNano()))
		}
		return out
	}
	first := applied()
	if len(first) != len(want) {
		t.Fatalf("schema_migrations = %v, want one row for each of %v", first, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(first[i], w+"@") {
			t.Fatalf("schema_migrations = %v, want %v", first, want)
		}
	}
	// Re-opening applies nothing again: the rows (and their times) stay.
	s, err := store.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if again := applied(); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("re-open changed schema_migrations: %v, was %v", again, first)
	}
}

// Sandbox records live in the sandboxes table with their fields as
// columns; every other bucket goes to records.
func TestPostgresTables(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Start(t)
	s, err := store.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sb := map[string]any{"id": "sb-1", "project": "team", "state": "running", "node": "node-a", "vcpus": 1}
	if err := s.Put(store.SandboxBucket, "sb-1", sb); err != nil {
		t.Fatal(err)
	}
	db := connect(t, url)
	var project, state, node string
	var updated time.Time
	if err := db.QueryRow(ctx, `SELECT project, state, node, updated_at FROM sandboxes WHERE id = 'sb-1'`).Scan(&project, &state, &node, &updated); err != nil {
		t.Fatal(err)
	}
	if project != "team" || state != "running" || node != "node-a" || time.Since(updated) > time.Minute {
		t.Fatalf("sandbox row = %q %q %q %v", project, state, node, updated)
	}
	sb["state"] = "stopped"
	delete(sb, "node")
	if err := s.Put(store.SandboxBucket, "sb-1", sb); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT state, node FROM sandboxes WHERE id = 'sb-1'`).Scan(&state, &node); err != nil || state != "stopped" || node != "" {
		t.Fatalf("after overwrite: state %q node %q, %v", state, node, err)
	}

	if err := s.Put("sandbox_events", "sb-1", []string{"created"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM records WHERE bucket = 'sandbox_events' AND key = 'sb-1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("records rows for sandbox_events/sb-1 = %d, %v", n, err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM records WHERE bucket = 'sandboxes'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("sandbox records in the generic table: %d, %v", n, err)
	}
}

// OpenURL picks the backend by the string's form.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := store.OpenURL(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a path did not open a bbolt file there: %v", err)
	}

	url := pgtest.Start(t)
	for _, u := range []string{url, strings.Replace(url, "postgres://", "postgresql://", 1)} {
		s, err := store.OpenURL(ctx, u)
		if err != nil {
			t.Fatalf("OpenURL(%s): %v", u, err)
		}
		if err := s.Put("things", "a", 1); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	var n int
	if err := connect(t, url).QueryRow(ctx, `SELECT count(*) FROM records`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("records in postgres after puts through both URL forms = %d, %v", n, err)
	}

	for _, bad := range []string{"", "mysql://localhost/space", "postgres://[::1"} {
		if s, err := store.OpenURL(ctx, bad); err == nil {
			s.Close()
			t.Errorf("OpenURL(%q) succeeded", bad)
		}
	}
	// The password of a URL that fails to connect stays out of the error.
	_, err = store.OpenURL(ctx, "postgres://space:hunter2@127.0.0.1:1/x?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unreachable database: err = %v", err)
	}
}
