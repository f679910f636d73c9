package server

import (
	"os"
	"path/filepath"
	"testing"
)

// The cluster token of a one-house serve is made once, private, and kept.
func TestClusterTokenMadeOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), clusterTokenFile)
	first, err := loadOrCreateClusterToken(path)
	if err != nil || len(first) != 64 {
		t.Fatalf("token %q, %v", first, err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", info, err)
	}
	again, err := loadOrCreateClusterToken(path)
	if err != nil || again != first {
		t.Fatalf("token changed: %q → %q (%v)", first, again, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateClusterToken(path); err == nil {
		t.Fatal("an empty token file was taken")
	}
}
