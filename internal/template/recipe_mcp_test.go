package template

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecipeMCPGateway(t *testing.T) {
	ok := "from: minimal\nmcp:\n  gateway: /usr/local/bin/mcp-gateway\n"
	r, err := ParseRecipe([]byte(ok))
	if err != nil || r.MCP == nil || r.MCP.Gateway != "/usr/local/bin/mcp-gateway" {
		t.Fatalf("%q: %+v, %v", ok, r, err)
	}
	for _, gw := range []string{"", "mcp-gateway", "/opt/gw/mcp-gateway", "/usr/local/bin/gateway", "/usr/local/bin/../bin/mcp-gateway", "/usr/local/bin/mcp-gateway/"} {
		recipe := "from: minimal\nmcp:\n  gateway: \"" + gw + "\"\n"
		if _, err := ParseRecipe([]byte(recipe)); err == nil || !strings.Contains(err.Error(), "mcp.gateway") {
			t.Errorf("gateway %q: %v, want an error naming mcp.gateway", gw, err)
		}
	}
	if _, err := ParseRecipe([]byte("from: minimal\nmcp:\n  gateway: /bin/mcp-gateway\n  port: 1\n")); err == nil {
		t.Error("an unknown mcp field was accepted")
	}
	// Declaring a gateway changes the template's identity; not declaring
	// one leaves the identity of existing recipes as it was.
	a := resolvedRecipe{From: "minimal"}
	b := resolvedRecipe{From: "minimal", MCPGateway: "/bin/mcp-gateway"}
	if a.id() == b.id() {
		t.Error("the gateway does not change the template id")
	}
}

func TestCheckMCPGatewayInRootfs(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "opt"), 0o755))
	must(os.WriteFile(filepath.Join(root, "opt/gw"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "opt/plain"), []byte("x"), 0o644))
	must(os.Symlink("/opt/gw", filepath.Join(root, "usr/local/bin/mcp-gateway")))
	must(os.Symlink("/opt/plain", filepath.Join(root, "usr/local/bin/plain")))
	must(os.Symlink("../../../../../etc/hostname", filepath.Join(root, "usr/local/bin/escape")))
	if err := checkMCPGateway(root, ""); err != nil {
		t.Errorf("no gateway: %v", err)
	}
	if err := checkMCPGateway(root, "/usr/local/bin/mcp-gateway"); err != nil {
		t.Errorf("an absolute link to an executable inside the rootfs: %v", err)
	}
	for _, gw := range []string{"/usr/local/bin/plain", "/usr/local/bin/escape", "/usr/local/bin/missing", "/opt"} {
		if err := checkMCPGateway(root, gw); err == nil || !strings.Contains(err.Error(), "mcp.gateway") {
			t.Errorf("%s: %v, want a build error naming mcp.gateway", gw, err)
		}
	}
}
