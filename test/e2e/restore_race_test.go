package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// A restore of A from B's snapshot racing the deletion of that snapshot,
// 50 times. Whichever wins, every answer is 2xx, 404 or 409 (never 500),
// neither sandbox is lost or failed, and A holds either the snapshot (the
// restore won) or every write acknowledged before it (the delete won).
func TestRestoreDeleteRace(t *testing.T) {
	a := newSandbox(t, apiv1.CreateSandboxRequest{})
	b := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	c := env.client
	if _, err := c.WriteFile(ctx, b.ID, "/home/user/from-b.txt", strings.NewReader("the snapshot")); err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	restored, deleted, refused := 0, 0, 0
	snapshotExists := false
	for i := 0; i < rounds; i++ {
		if !snapshotExists {
			if _, err := c.CreateSnapshot(ctx, b.ID, "bs"); err != nil {
				t.Fatalf("round %d: snapshot: %v", i, err)
			}
		}
		mine := fmt.Sprintf("/home/user/a-%02d.txt", i)
		if _, err := c.WriteFile(ctx, a.ID, mine, strings.NewReader("acknowledged")); err != nil {
			t.Fatalf("round %d: write: %v", i, err)
		}
		restoreErr, deleteErr := raceSnapshotDelete(t, i, "restore", func() error {
			_, err := c.Restore(ctx, a.ID, b.ID+"/bs")
			return err
		}, func() error { return c.DeleteSnapshot(ctx, b.ID, "bs") })
		if statusOf(deleteErr) == http.StatusConflict && !strings.Contains(deleteErr.Error(), "restore") {
			t.Errorf("round %d: the 409 does not name the restore: %v", i, deleteErr)
		}
		snapshotExists = deleteErr != nil
		switch {
		case restoreErr == nil:
			restored++
		case deleteErr == nil:
			deleted++
		}
		if deleteErr != nil {
			refused++
		}
		got, err := c.GetSandbox(ctx, a.ID)
		if err != nil || got.State != apiv1.StateRunning {
			t.Fatalf("round %d: sandbox A after the race: %+v, %v", i, got, err)
		}
		if restoreErr == nil {
			if s := readString(t, a.ID, "/home/user/from-b.txt"); s != "the snapshot" {
				t.Fatalf("round %d: restore answered 200 but A holds %q", i, s)
			}
			// The restore was acknowledged: A is B's snapshot now, and the
			// files acknowledged before it are rightly gone.
			continue
		}
		if s := readString(t, a.ID, mine); s != "acknowledged" {
			t.Fatalf("round %d: the restore did not happen, yet A lost an acknowledged write: %q", i, s)
		}
	}
	if _, err := c.GetSandbox(ctx, b.ID); err != nil {
		t.Fatalf("sandbox B lost: %v", err)
	}
	execOK(t, a.ID, "true")
	execOK(t, b.ID, "true")
	t.Logf("%d rounds: %d restores won, %d deletes won, %d deletes refused with 409", rounds, restored, deleted, refused)
}

// raceSnapshotDelete runs use (a call named what) and del at the same
// instant and fails the test unless both answered 2xx, 404 or 409.
func raceSnapshotDelete(t *testing.T, round int, what string, use, del func() error) (useErr, delErr error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-start
		useErr = use()
	}()
	go func() {
		defer wg.Done()
		<-start
		delErr = del()
	}()
	close(start)
	wg.Wait()
	for name, err := range map[string]error{what: useErr, "delete snapshot": delErr} {
		if code := statusOf(err); code != 0 && code != http.StatusNotFound && code != http.StatusConflict {
			t.Fatalf("round %d: %s answered %v; want 2xx, 404 or 409", round, name, err)
		}
	}
	return useErr, delErr
}

// statusOf is an API error's status code, 0 for success; other errors
// count as 500.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return http.StatusInternalServerError
}

// readString reads a whole file of a sandbox; a missing one reads as
// "<missing: ...>" so a comparison fails with the reason.
func readString(t *testing.T, id, path string) string {
	t.Helper()
	r, err := env.client.ReadFile(testContext(t), id, path)
	if err != nil {
		return "<missing: " + err.Error() + ">"
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return "<unreadable: " + err.Error() + ">"
	}
	return string(b)
}

// A start of a new sandbox from B's snapshot racing the deletion of that
// snapshot: the create answers 202 or 404, the delete 204 or 409, and a
// sandbox whose create was accepted runs, holding the snapshot's files.
func TestCreateFromSnapshotDeleteRace(t *testing.T) {
	b := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	c := env.client
	if _, err := c.WriteFile(ctx, b.ID, "/home/user/from-b.txt", strings.NewReader("the snapshot")); err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	started := 0
	snapshotExists := false
	for i := 0; i < rounds; i++ {
		if !snapshotExists {
			if _, err := c.CreateSnapshot(ctx, b.ID, "bs"); err != nil {
				t.Fatalf("round %d: snapshot: %v", i, err)
			}
		}
		var created *apiv1.Sandbox
		createErr, deleteErr := raceSnapshotDelete(t, i, "create", func() (err error) {
			created, err = c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: b.ID + "/bs"})
			return err
		}, func() error { return c.DeleteSnapshot(ctx, b.ID, "bs") })
		snapshotExists = deleteErr != nil
		if createErr != nil {
			continue
		}
		started++
		sb, err := c.WaitSandbox(ctx, created.ID, apiv1.StateRunning, time.Minute)
		if err != nil {
			t.Fatalf("round %d: accepted sandbox from the snapshot: %+v, %v", i, sb, err)
		}
		if s := readString(t, created.ID, "/home/user/from-b.txt"); s != "the snapshot" {
			t.Fatalf("round %d: the new sandbox holds %q", i, s)
		}
		if err := c.DeleteSandbox(ctx, created.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: %d starts accepted", rounds, started)
}
