package controlplane

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// A data dir written before images were named holds absolute image paths
// (image_dir) in sandbox, capture and snapshot records. Recovery turns
// them into names, persists them, keeps those images from the sweep, and a
// suspended sandbox resumes from its image.
func TestLegacyImagePathsAreConverted(t *testing.T) {
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	// The records exactly as the earlier version wrote them.
	old := map[string]string{
		sandboxBucket + "/a": `{"id":"a","template":"tpl","template_id":"tpl","state":"suspended","vcpus":1,"memory_mb":256,
			"access_token":"token-a","timeout_s":3600,"lifecycle":{"auto_resume":true},
			"created_at":"2026-11-30T10:00:00Z","expires_at":"2026-11-30T11:00:00Z","suspended_at":"2026-11-30T10:30:00Z",
			"image_dir":"` + filepath.Join(images, "a", "suspend") + `"}`,
		sandboxBucket + "/br": `{"id":"br","template":"tpl","template_id":"tpl","state":"starting","vcpus":1,"memory_mb":256,
			"access_token":"token-br","timeout_s":3600,"branch_of":"b","lifecycle":{},
			"created_at":"2026-11-30T10:00:00Z","expires_at":"2099-11-30T11:00:00Z",
			"source":{"volume":"snapshots/b/branch-c1","image_dir":"` + filepath.Join(images, "b", "branches", "c1") + `","access_token":"token-b"}}`,
		snapshotBucket + "/b/bs": `{"id":"snap1","name":"bs","sandbox_id":"b","created_at":"2026-11-30T10:00:00Z",
			"volume":"snapshots/b/snap1","image_dir":"` + filepath.Join(images, "b", "snapshots", "snap1") + `",
			"template":"tpl","template_id":"tpl","access_token":"token-b","size_bytes":10}`,
		// Not below the images dir: nothing to find it by.
		sandboxBucket + "/elsewhere": `{"id":"elsewhere","template":"tpl","template_id":"tpl","state":"suspended","vcpus":1,"memory_mb":256,
			"access_token":"t","timeout_s":3600,"lifecycle":{},"created_at":"2026-11-30T10:00:00Z","expires_at":"2026-11-30T11:00:00Z",
			"image_dir":"/somewhere/else/suspend"}`,
	}
	for key, data := range old {
		bucket, k, _ := strings.Cut(key, "/")
		if err := st.Put(bucket, k, json.RawMessage(data)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	fn := newFakeNode()
	fn.images["a/suspend"], fn.images["b/branches/c1"], fn.images["b/snapshots/snap1"] = true, true, true
	fn.images["a/snapshots/orphan"] = true
	fn.volumes["sandboxes/a"], fn.volumes["snapshots/b/branch-c1"], fn.volumes["snapshots/b/snap1"] = true, true, true
	cp := newTestCPWith(t, Config{LegacyImagesDir: images}, dir, fn)

	if fn.hasImage("a/snapshots/orphan") {
		t.Error("an image no record owns survived the sweep")
	}
	for _, name := range []string{"a/suspend", "b/snapshots/snap1"} {
		if !fn.hasImage(name) {
			t.Errorf("converted image %s was swept", name)
		}
	}
	a := mustGet(t, cp, "a")
	if a.Image != "a/suspend" || a.LegacyImageDir != "" || a.State != apiv1.StateSuspended {
		t.Fatalf("converted sandbox: image %q, legacy %q, state %s", a.Image, a.LegacyImageDir, a.State)
	}
	var stored map[string]any
	if err := cp.cfg.Store.Get(sandboxBucket, "a", &stored); err != nil {
		t.Fatal(err)
	}
	if stored["image"] != "a/suspend" || stored["image_dir"] != nil {
		t.Fatalf("stored record not converted: image %v, image_dir %v", stored["image"], stored["image_dir"])
	}
	snap, err := cp.findSnapshot("b", "bs")
	if err != nil || snap.Image != "b/snapshots/snap1" || snap.LegacyImageDir != "" {
		t.Fatalf("converted snapshot: %+v, %v", snap, err)
	}
	if e := mustGet(t, cp, "elsewhere"); e.Image != "" {
		t.Fatalf("an image outside the images dir was given the name %q", e.Image)
	}

	// The interrupted branch restarts from its converted capture.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cp.Wait(ctx, "br", apiv1.StateRunning); err != nil {
		t.Fatalf("branch from a converted capture: %v", err)
	}
	if fn.called("resumefrom br b/branches/c1") != 1 {
		t.Fatalf("branch did not restore from its converted capture: %v", fn.calls)
	}
	// The suspended sandbox resumes from its image.
	if _, err := cp.Resume(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if fn.called("resumefrom a a/suspend") != 1 {
		t.Fatalf("resume did not use the converted image: %v", fn.calls)
	}
	if _, err := cp.Restore(context.Background(), project.Everything, "a", "b/bs"); err != nil {
		t.Fatal(err)
	}
	if fn.called("resumefrom a b/snapshots/snap1") != 1 {
		t.Fatalf("restore did not use the converted snapshot image: %v", fn.calls)
	}
}
