package e2e

import (
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestTemplateBuildUseAndDeleteRefusedWhileInUse(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	recipe := `
name: greeter
from: template:minimal
env: {GREETING: hello-from-template}
run:
  - echo built > /etc/greeting
workdir: /tmp
`
	tpl, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
	if err != nil {
		t.Fatal(err)
	}
	ready := waitTemplate(t, tpl.Name)
	if ready.ID == "" || ready.Name != "greeter" {
		t.Fatalf("template = %+v", ready)
	}
	// Same content, same version: no rebuild.
	again, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
	if err != nil || again.ID != ready.ID || again.State != apiv1.TemplateReady {
		t.Fatalf("resubmitting the same recipe = %+v, %v", again, err)
	}
	list, err := env.client.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range list {
		found = found || l.Name == "greeter"
	}
	if !found {
		t.Fatalf("greeter missing from %+v", list)
	}

	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "greeter"})
	if out := execOK(t, sb.ID, `echo "$GREETING"; cat /etc/greeting; pwd`); out != "hello-from-template\nbuilt\n/tmp\n" {
		t.Fatalf("sandbox from greeter sees %q", out)
	}
	if err := env.client.DeleteTemplate(ctx, "greeter"); !client.IsConflict(err) {
		t.Fatalf("delete of a template in use: %v, want 409", err)
	}
	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DeleteTemplate(ctx, "greeter"); err != nil {
		t.Fatalf("delete of an unused template: %v", err)
	}
	if _, err := env.client.GetTemplate(ctx, "greeter"); !client.IsNotFound(err) {
		t.Fatalf("deleted template still found: %v", err)
	}
}

func TestAPIKeys(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	key, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	user := client.New(env.srv.URL, key.Key)
	if _, err := user.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("new key rejected: %v", err)
	}
	if _, err := user.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "escalate"}); err == nil {
		t.Fatal("a non-admin key created a key")
	}
	if err := env.client.RevokeKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := user.ListSandboxes(ctx, client.ListOptions{}); err == nil {
		t.Fatal("revoked key still accepted")
	}
}

// e2eMaxArchive is the shared server's upload limit (harness_test.go).
const e2eMaxArchive = 8 << 20
