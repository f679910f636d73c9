package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// E2B's DELETE /templates/{templateID} on `space serve` deletes a template
// the caller's project built natively (as one built from code), with its
// E2B tags: 404 for another project, 409 while a sandbox uses it, then
// 204, after which neither the name nor its tag resolves.
func TestE2BDeleteProjectTemplate(t *testing.T) {
	requireServer(t)
	a, b := newTenant(t, "tpldel-a"), newTenant(t, "tpldel-b")
	keyA, keyB := a.secretKeys[0], b.secretKeys[0]
	e2bURL := env.srv.E2BURL()
	name := fmt.Sprintf("tpldel-%d", os.Getpid())
	ctx := testContext(t)
	if _, err := a.clients[0].CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: name, Recipe: "from: minimal\nrun:\n  - echo deleted-later > /marker\n"}); err != nil {
		t.Fatal(err)
	}
	waitTemplate(t, a.project+"/"+name)
	if r := raw(t, e2bURL, keyA, http.MethodPost, "/templates/tags", fmt.Sprintf(`{"target":%q,"tags":["t1"]}`, name)); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("tag the native template: %d %s", r.status, r.body)
	}
	r := raw(t, e2bURL, keyA, http.MethodPost, "/sandboxes", fmt.Sprintf(`{"templateID":"%s:t1","timeout":300}`, name))
	var sb struct{ SandboxID string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &sb) != nil {
		t.Fatalf("create from the tag: %d %s", r.status, r.body)
	}

	if r := raw(t, e2bURL, keyB, http.MethodDelete, "/templates/"+name, ""); r.status != http.StatusNotFound {
		t.Fatalf("B deletes A's template: %d %s", r.status, r.body)
	}
	for _, id := range []string{name + ":t1", "minimal", "../" + name} {
		if r := raw(t, e2bURL, keyA, http.MethodDelete, "/templates/"+id, ""); r.status != http.StatusNotFound {
			t.Fatalf("delete %q: %d %s", id, r.status, r.body)
		}
	}
	if r := raw(t, e2bURL, keyA, http.MethodDelete, "/templates/"+name, ""); r.status != http.StatusConflict {
		t.Fatalf("delete while a sandbox uses it: %d %s", r.status, r.body)
	}
	// Refused, it keeps its tag.
	if r := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+name+"/tags", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"t1"`) {
		t.Fatalf("tags after a refused delete: %d %s", r.status, r.body)
	}
	if r := raw(t, e2bURL, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if r := raw(t, e2bURL, keyA, http.MethodDelete, "/templates/"+name, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, id := range []string{name, name + ":t1"} {
		if r := raw(t, e2bURL, keyA, http.MethodPost, "/sandboxes", fmt.Sprintf(`{"templateID":%q}`, id)); r.status != http.StatusNotFound {
			t.Fatalf("create from %s after the delete: %d %s", id, r.status, r.body)
		}
	}
	if _, err := a.clients[0].GetTemplate(ctx, name); err == nil {
		t.Fatal("the native API still has the template")
	}
}
