package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A project's uploaded files are bounded: the least recently used go
// first, never the one just uploaded nor one used within the grace.
func TestE2BFilesEviction(t *testing.T) {
	dir := t.TempDir()
	tp := &e2bTemplates{filesBudget: 250}
	old := time.Now().Add(-2 * filesGrace)
	for i, name := range []string{"oldest", "older", "recent", "new"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 100), 0o600); err != nil {
			t.Fatal(err)
		}
		at := old.Add(time.Duration(i) * time.Minute)
		if name == "recent" || name == "new" {
			at = time.Now()
		}
		os.Chtimes(p, at, at)
	}
	tp.evict(dir, filepath.Join(dir, "new"))
	for name, want := range map[string]bool{"oldest": false, "older": false, "recent": true, "new": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", name, err == nil, want)
		}
	}
}
