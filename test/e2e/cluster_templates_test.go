package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// A template built through a cluster's control plane is built once, on
// one node, and shipped to the other: it becomes ready, both nodes hold
// it, a sandbox of it runs on each node (the other cordoned) with the
// file its run step wrote, its delete is refused while a sandbox uses it
// and then removes it from both nodes.
func TestClusterTemplateBuiltOnceShipped(t *testing.T) {
	c := startCluster(t, 2)
	ctx := testContext(t)
	cl := c.client

	tpl, err := cl.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "hello", Recipe: "from: minimal\nrun:\n  - echo hi from the build > /hello\n"})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.State != apiv1.TemplateBuilding {
		t.Fatalf("submitted: %+v", tpl)
	}
	// The build's log, followed through the control plane while the
	// node builds, ends once the template is ready.
	lines := followTemplateLog(ctx, t, cl, "hello")
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "echo hi from the build") }) {
		t.Fatalf("the build's log through the control plane: %q", lines)
	}
	tpl = waitOnEveryNode(t, c, "hello")
	logs, err := cl.GetTemplateLogsFrom(ctx, "hello", 0)
	if err != nil || !slices.ContainsFunc(logs.Logs, func(l string) bool { return strings.Contains(l, "echo hi from the build") }) {
		t.Fatalf("the build's log through the control plane: %+v, %v", logs, err)
	}
	ns, err := cl.ListNodes(ctx)
	if err != nil || len(ns) != 2 {
		t.Fatalf("nodes: %+v, %v", ns, err)
	}
	ids := []string{ns[0].ID, ns[1].ID}

	var sbs []string
	for i, id := range ids {
		other := ids[1-i]
		if _, err := cl.CordonNode(ctx, other); err != nil {
			t.Fatal(err)
		}
		sb, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "hello"})
		if err != nil {
			t.Fatalf("create on %s: %v", id, err)
		}
		if sb, err = cl.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
		if sb.Node != id {
			t.Fatalf("sandbox %s on %s, want %s (the other is cordoned)", sb.ID, sb.Node, id)
		}
		res, err := cl.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"cat", "/hello"}})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi from the build" {
			t.Fatalf("cat /hello on %s: %+v, %v", id, res, err)
		}
		if _, err := cl.UncordonNode(ctx, other); err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb.ID)
	}

	// An archive uploaded through the control plane streams to the node
	// that builds; the template is shipped to the other as well.
	img := busyboxImage(t)
	up, err := cl.CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: "uploaded", Recipe: "from: upload\nuser: root\nrun:\n  - echo uploaded > /from-archive\n"}, bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatalf("build from an uploaded archive: %v", err)
	}
	if up.State != apiv1.TemplateBuilding || up.Project == "" {
		t.Fatalf("submitted: %+v", up)
	}
	waitOnEveryNode(t, c, "uploaded")
	usb, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "uploaded"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitSandbox(ctx, usb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if res, err := cl.Exec(ctx, usb.ID, apiv1.ExecRequest{Cmd: []string{"cat", "/from-archive"}}); err != nil || strings.TrimSpace(res.Stdout) != "uploaded" {
		t.Fatalf("cat /from-archive: %+v, %v", res, err)
	}
	if err := cl.DeleteSandbox(ctx, usb.ID); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteTemplate(ctx, "uploaded"); err != nil {
		t.Fatal(err)
	}

	var apiErr *client.APIError
	if err := cl.DeleteTemplate(ctx, "hello"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict {
		t.Fatalf("delete while sandboxes use it: %v", err)
	}
	for _, id := range sbs {
		if err := cl.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.DeleteTemplate(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetTemplate(ctx, "hello"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ns, err := cl.ListNodes(ctx)
		if err == nil && !slices.ContainsFunc(ns, func(n apiv1.Node) bool { return slices.Contains(n.Templates, tpl.ID) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("template %s still on nodes after its delete: %+v, %v", tpl.ID, ns, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitOnEveryNode waits until the template is ready and every node holds
// it: built on one, shipped to the others.
func waitOnEveryNode(t *testing.T, c *testCluster, name string) *apiv1.Template {
	t.Helper()
	ctx := testContext(t)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		tpl, err := c.client.GetTemplate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if tpl.State == apiv1.TemplateFailed {
			t.Fatalf("template %s: %+v", name, tpl)
		}
		ns, err := c.client.ListNodes(ctx)
		if tpl.State == apiv1.TemplateReady && err == nil && c.allHold(ns, tpl.ID) {
			return tpl
		}
		if time.Now().After(deadline) {
			t.Fatalf("template %s: %+v, on nodes %+v (%v)", name, tpl, ns, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
