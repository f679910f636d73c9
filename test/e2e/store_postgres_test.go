package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
)

// `space serve --store postgres://...` keeps its state in PostgreSQL: a
// sandbox, its files and its snapshot survive a kill -9 of the server, the
// sandbox state machine is the sandboxes table, and no state.db is made.
func TestServeOnPostgres(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "starts and kills a separate server")
	url := pgtest.Start(t)
	base := t.TempDir()
	s := &crashServer{t: t, dataDir: filepath.Join(base, "data"), listen: freePort(t), store: url}
	t.Cleanup(func() { s.stop(base) })
	s.start()
	ctx := testContext(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	rowState := func(id string) string {
		t.Helper()
		var state string
		err := db.QueryRow(ctx, `SELECT state FROM sandboxes WHERE id = $1`, id).Scan(&state)
		if err == pgx.ErrNoRows {
			return "(no row)"
		} else if err != nil {
			t.Fatal(err)
		}
		return state
	}

	sb, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Metadata: map[string]string{"store": "postgres"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := rowState(sb.ID); got != apiv1.StateRunning {
		t.Fatalf("sandboxes row state = %s, want running", got)
	}
	if _, err := s.client.WriteFile(ctx, sb.ID, "/home/user/kept.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CreateSnapshot(ctx, sb.ID, "before"); err != nil {
		t.Fatal(err)
	}

	s.kill()
	s.start()
	got, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata["store"] != "postgres" {
		t.Fatalf("metadata after restart = %v", got.Metadata)
	}
	r, err := s.client.ReadFile(ctx, sb.ID, "/home/user/kept.txt")
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(r)
	r.Close()
	if string(content) != "kept" {
		t.Fatalf("file after restart = %q", content)
	}
	snaps, err := s.client.ListSnapshots(ctx, sb.ID)
	if err != nil || len(snaps) != 1 || snaps[0].Name != "before" {
		t.Fatalf("snapshots after restart = %+v, %v", snaps, err)
	}

	if _, err := s.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := rowState(sb.ID); got != apiv1.StateSuspended {
		t.Fatalf("sandboxes row state after suspend = %s", got)
	}
	execOK2(t, s.client, sb.ID) // resumes it
	if err := s.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "state.db")); !os.IsNotExist(err) {
		t.Fatalf("a postgres-backed server made state.db (stat: %v)", err)
	}
}
