package e2e

import (
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// legacyRecord rewrites a stored record as versions before named images
// wrote it: the image by its absolute path (image_dir), no name.
func legacyRecord(t *testing.T, st store.Store, bucket, key string) {
	t.Helper()
	var rec map[string]any
	if err := st.Get(bucket, key, &rec); err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	name, _ := rec["image"].(string)
	if name == "" {
		t.Fatalf("%s/%s names no image: %v", bucket, key, rec)
	}
	delete(rec, "image")
	rec["image_dir"] = filepath.Join(env.dataDir, "images", filepath.FromSlash(name))
	if err := st.Put(bucket, key, rec); err != nil {
		t.Fatal(err)
	}
}

// A data dir written before images were named (records with absolute
// image paths) keeps working: after a restart its suspended sandbox
// resumes with its memory, and its snapshot restores.
func TestLegacyImagePathsResume(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	pid := startCounter(t, sb.ID)
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "old"); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "echo after-snapshot > /home/user/marker")
	before := count(t, sb.ID)
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(env.dataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	legacyRecord(t, st, "sandboxes", sb.ID)
	legacyRecord(t, st, "snapshots", sb.ID+"/old")
	st.Close()
	if err := startServer(); err != nil {
		t.Fatal(err)
	}

	if got, err := env.client.GetSandbox(ctx, sb.ID); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("after restart on legacy records: %+v, %v", got, err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resume from a legacy image path: %v", err)
	}
	requireCounting(t, sb.ID, before, pid)
	if _, err := env.client.Restore(ctx, sb.ID, "old"); err != nil {
		t.Fatalf("restore of a snapshot with a legacy image path: %v", err)
	}
	if out := execOK(t, sb.ID, "cat /home/user/marker 2>/dev/null || echo none"); out != "none\n" {
		t.Fatalf("after restoring the snapshot the marker reads %q, want none", out)
	}
}
