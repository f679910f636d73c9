package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/cluster"
)

// A node's id is made once per data dir, kept, and differs between two
// nodes of one machine; a hand-edited invalid one is refused.
func TestNodeIDIsKeptPerDataDir(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	idA, err := nodeID(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ValidID(idA); err != nil {
		t.Fatalf("made id %q: %v", idA, err)
	}
	if again, err := nodeID(a); err != nil || again != idA {
		t.Fatalf("second read = %q, %v; want %q", again, err, idA)
	}
	idB, err := nodeID(b)
	if err != nil || idB == idA {
		t.Fatalf("ids of two data dirs: %q and %q (%v)", idA, idB, err)
	}
	if err := os.WriteFile(filepath.Join(b, "node-id"), []byte("Not_Valid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeID(b); err == nil || !strings.Contains(err.Error(), "must be 1 to 63") {
		t.Fatalf("invalid node-id file: %v", err)
	}
}
