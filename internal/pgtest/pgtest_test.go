package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// Two tests' databases are distinct and usable.
func TestDatabasesAreSeparate(t *testing.T) {
	ctx := context.Background()
	a, b := Start(t), Start(t)
	if a == b {
		t.Fatalf("two databases share the URL %s", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, `CREATE TABLE only_in_a (x int)`); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table of a seen in b: n=%d err=%v", n, err)
	}
	var owner string
	if err := ca.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner == "/var/lib/postgresql/15/main" {
		t.Fatal("connected to the system cluster")
	}
}

// Without PostgreSQL the error says how to install it.
func TestMissingPostgresSaysWhatToRun(t *testing.T) {
	_, err := binDir(filepath.Join(t.TempDir(), "*", "bin", "initdb"))
	if err == nil || !strings.Contains(err.Error(), "scripts/install-deps.sh") {
		t.Fatalf("binDir without PostgreSQL: err = %v", err)
	}
	if dir, err := binDir(installed); err != nil || !strings.HasSuffix(dir, "/bin") {
		t.Fatalf("binDir of the installed PostgreSQL = %q, %v", dir, err)
	}
}
