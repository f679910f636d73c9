package server

import (
	"go/build"
	"slices"
	"testing"
)

// The API layers reach sandboxes only through nodeapi.Sandbox, and the
// control plane drives nodes only through nodeapi.Node, which an RPC
// client to a remote node implements as well as the local node does;
// importing the node package would let in-process pointers and paths back
// in.
func TestAPILayersDoNotImportNode(t *testing.T) {
	const nodePkg = "github.com/space-platform/space/internal/node"
	for _, dir := range []string{"../api", "../e2b", "../proxy", "../controlplane"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		if len(pkg.GoFiles) == 0 {
			t.Fatalf("%s: no Go files read", dir)
		}
		if slices.Contains(slices.Concat(pkg.Imports, pkg.TestImports), nodePkg) {
			t.Errorf("%s imports %s; use nodeapi", dir, nodePkg)
		}
	}
}
