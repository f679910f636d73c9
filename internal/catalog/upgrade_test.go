package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

// serve's E2B build records become the store's: one never triggered
// waits, one whose template is ready or failed ended so, one whose build
// the upgrade cut short failed; a record there already stays, and a torn
// file is skipped as serve skipped it.
func TestUpgradeImportsServesE2BBuilds(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	builds := filepath.Join(dir, "e2b", "builds")
	if err := os.MkdirAll(builds, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for id, tplID := range map[string]string{"waiting": "", "ready": "t-ready", "failed": "t-failed", "cut": "t-building", "gone": "t-gone", "kept": "t-ready"} {
		data, _ := json.Marshal(e2b.TemplateBuild{ID: id, Name: "app", Project: "p1", TemplateID: tplID, CreatedAt: now})
		if err := os.WriteFile(filepath.Join(builds, id+".json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(builds, "torn.json"), []byte(`{"id":"to`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(e2bBuildsBucket, "kept", e2bBuild{TemplateBuild: e2b.TemplateBuild{ID: "kept"}, State: "mine"}); err != nil {
		t.Fatal(err)
	}
	templates := map[string]*template.Template{
		"t-ready":    {ID: "t-ready", State: template.StateReady},
		"t-failed":   {ID: "t-failed", State: template.StateFailed, Reason: "step 2 failed"},
		"t-building": {ID: "t-building", State: template.StateBuilding},
	}
	get := func(id string) (*template.Template, error) {
		if t, ok := templates[id]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("template %s: %w", id, template.ErrNotFound)
	}
	n, err := ImportServeE2BBuilds(st, get, builds)
	if err != nil || n != 5 {
		t.Fatalf("imported %d, %v; want the 5 new", n, err)
	}
	for id, want := range map[string]string{"waiting": "", "ready": template.StateReady, "failed": template.StateFailed, "cut": template.StateFailed, "gone": template.StateFailed, "kept": "mine"} {
		var b e2bBuild
		if err := st.Get(e2bBuildsBucket, id, &b); err != nil {
			t.Fatalf("build %s: %v", id, err)
		}
		if b.State != want {
			t.Errorf("build %s: state %q (%s), want %q", id, b.State, b.Reason, want)
		}
		if id == "failed" && b.Reason != "step 2 failed" {
			t.Errorf("failed build's reason: %q", b.Reason)
		}
		if want != "" && want != "mine" && b.Ended.IsZero() {
			t.Errorf("build %s ended but has no end", id)
		}
	}
	if n, err := ImportServeE2BBuilds(st, get, builds); err != nil || n != 0 {
		t.Fatalf("a second import made %d records, %v", n, err)
	}
}
