package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A template built through the API, in each house: its build log is
// followed through the API to its end; the same recipe again is the same
// template, not a second build; a sandbox of it on every node (the others
// cordoned) sees what the recipe set (env, workdir, a file its build
// wrote); a built-in template is not the admin's to delete (409); an archive uploaded through the API builds and ships as well;
// a delete is refused while a sandbox uses the template, and after it no
// node keeps a copy.
func TestTemplateBuildUseAndDelete(t *testing.T) {
	inEachHouse(t, func(t *testing.T, h *house) {
		ctx := testContext(t)
		cl := h.admin()
		// A step that names the run: a recipe an earlier run built comes
		// whole from the build cache, and its steps do not run again.
		marker := fmt.Sprintf("built-by-run-%d", time.Now().UnixNano())
		recipe := "name: greeter\nfrom: template:minimal\nenv: {GREETING: hello-from-template}\n" +
			"run:\n  - echo " + marker + " > /etc/greeting\nworkdir: /tmp\n"
		tpl, err := cl.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
		if err != nil {
			t.Fatal(err)
		}
		if tpl.State != apiv1.TemplateBuilding {
			t.Fatalf("submitted: %+v", tpl)
		}
		// The build's log, followed through the API while a node builds,
		// ends once the template is ready.
		lines := followTemplateLog(ctx, t, cl, "greeter")
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "echo "+marker) }) {
			t.Fatalf("the build's log through the API: %q", lines)
		}
		ready := h.templateEverywhere(t, "greeter")
		if logs, err := cl.GetTemplateLogsFrom(ctx, "greeter", 0); err != nil || !slices.ContainsFunc(logs.Logs, func(l string) bool { return strings.Contains(l, "echo "+marker) }) {
			t.Fatalf("the build's log, read again: %+v, %v", logs, err)
		}
		// Same content: the same template, no second build.
		again, err := cl.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
		if err != nil || again.ID != ready.ID || again.State != apiv1.TemplateReady {
			t.Fatalf("resubmitting the same recipe = %+v, %v", again, err)
		}
		// A built-in template: the admin's delete is refused (409), as
		// every node builds it at its start; it stays.
		if err := cl.DeleteTemplate(ctx, "minimal"); !client.IsConflict(err) || !strings.Contains(err.Error(), "built-in") {
			t.Fatalf("the admin deletes minimal: %v, want 409 saying it is built in", err)
		}
		list, err := cl.ListTemplates(ctx)
		if err != nil || !slices.ContainsFunc(list, func(l apiv1.Template) bool { return l.Name == "greeter" }) {
			t.Fatalf("greeter missing from %+v (%v)", list, err)
		}

		var sbs []string
		h.onEachNode(t, func(node string) {
			sb := h.sandbox(t, apiv1.CreateSandboxRequest{Template: "greeter"})
			if sb.Node != node || sb.TemplateID != ready.ID {
				t.Fatalf("sandbox %s runs %s on %s, want %s on %s", sb.ID, sb.TemplateID, sb.Node, ready.ID, node)
			}
			if out := h.run(t, sb.ID, "", `echo "$GREETING"; cat /etc/greeting; pwd`); out != "hello-from-template\n"+marker+"\n/tmp\n" {
				t.Fatalf("a sandbox of greeter on %s sees %q", node, out)
			}
			sbs = append(sbs, sb.ID)
		})

		// An archive uploaded through the API streams to the node that
		// builds; the template ships to the others as well.
		img := busyboxImage(t)
		up, err := cl.CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: "uploaded", Recipe: "from: upload\nuser: root\nrun:\n  - echo uploaded > /from-archive\n"}, bytes.NewReader(img), int64(len(img)))
		if err != nil {
			t.Fatalf("build from an uploaded archive: %v", err)
		}
		if up.Project == "" {
			t.Fatalf("submitted: %+v", up)
		}
		h.templateEverywhere(t, "uploaded")
		usb := h.sandbox(t, apiv1.CreateSandboxRequest{Template: "uploaded"})
		if out := h.run(t, usb.ID, "", "cat /from-archive"); strings.TrimSpace(out) != "uploaded" {
			t.Fatalf("cat /from-archive: %q", out)
		}
		if err := cl.DeleteSandbox(ctx, usb.ID); err != nil {
			t.Fatal(err)
		}
		if err := cl.DeleteTemplate(ctx, "uploaded"); err != nil {
			t.Fatal(err)
		}

		if err := cl.DeleteTemplate(ctx, "greeter"); !client.IsConflict(err) {
			t.Fatalf("delete of a template in use: %v, want 409", err)
		}
		for _, id := range sbs {
			if err := cl.DeleteSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.DeleteTemplate(ctx, "greeter"); err != nil {
			t.Fatalf("delete of an unused template: %v", err)
		}
		if _, err := cl.GetTemplate(ctx, "greeter"); !client.IsNotFound(err) {
			t.Fatalf("deleted template still found: %v", err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
			ns, err := cl.ListNodes(ctx)
			if err == nil && !slices.ContainsFunc(ns, func(n apiv1.Node) bool { return slices.Contains(n.Templates, ready.ID) }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("template %s still on nodes after its delete: %+v, %v", ready.ID, ns, err)
			}
		}
	})
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
