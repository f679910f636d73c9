package template

import (
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
