package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/internal/redteam"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// The build escapes of issue 10, played by the red team's build cases
// against the real build path: a two-recipe cgroup release_agent escape
// (the first recipe leaves a payload in its template, the second points
// release_agent at its host path), a core_pattern pipe, and a step
// dialing the host's 127.0.0.1 and addresses. Each verdict comes from the
// host: the drop file in the canary directory, the host's core_pattern,
// the host listener that records every connection.
//
// In the parallel group: it waits on builds far more than it computes,
// and its canaries and listener are its own.
func TestTemplateBuildEscapesAreBlocked(t *testing.T) {
	requireServer(t)
	inParallelGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var names []string
	for _, a := range redteam.Select(redteam.Catalog(), []redteam.Category{redteam.Build}, nil) {
		names = append(names, a.Name)
	}
	if len(names) < 3 {
		t.Fatalf("build cases: %q", names)
	}
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	report, err := redteam.Run(ctx, redteam.Config{
		URL: env.srv.URL, APIKey: env.srv.AdminKey, Template: "minimal", DataDir: env.dataDir, Names: names,
		Progress: func(r redteam.Result) { t.Logf("%-8s %-55s %s", r.Outcome, r.Name, r.Evidence) },
	})
	if err != nil {
		t.Fatalf("red team run: %v", err)
	}
	for _, n := range report.Notes {
		t.Logf("note: %s", n)
	}
	if len(report.Results) != len(names) {
		t.Fatalf("%d results for %d cases", len(report.Results), len(names))
	}
	for _, r := range report.Results {
		if r.Outcome != redteam.Blocked {
			t.Errorf("%s: %s: %s", r.Name, r.Outcome, r.Evidence)
		}
	}
	// Belt and braces: the host's own core_pattern, read here.
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(now, corePattern) {
		t.Errorf("the host's core_pattern changed from %q to %q", corePattern, now)
	}
	// The red team deleted its templates.
	list, _ := env.client.ListTemplates(ctx)
	for _, tpl := range list {
		if strings.HasPrefix(tpl.Name, "redteam-") {
			t.Errorf("template %s left behind", tpl.Name)
		}
	}
}

// A recipe naming host paths needs an admin key: from: oci-layout: and
// oci-archive: would read the server's disk, files: would copy from it.
func TestTemplateHostPathsNeedAdmin(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	user := userClient(t)
	for _, recipe := range []string{
		"name: hostpath\nfrom: oci-layout:/etc\n",
		"name: hostpath\nfrom: oci-archive:/var/lib/space/admin.key\n",
		"name: hostpath\nfrom: minimal\nfiles: [{src: /etc/shadow, dest: /shadow}]\n",
	} {
		_, err := user.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
		var apiErr *client.APIError
		if !errorsAs(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || !strings.Contains(apiErr.Message, "admin key") {
			t.Errorf("non-admin %q: %v, want 403 naming the admin key", recipe, err)
		}
	}
	// The admin passes the check and meets the ordinary one instead:
	// serve's catalog reads the path on submit (400); the cluster's (one
	// house) leaves it to the node, where the path is read, and the build
	// fails there saying so.
	_, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: "name: hostpath\nfrom: oci-archive:/nonexistent/image.tar\n"})
	var apiErr *client.APIError
	switch {
	case err == nil:
		tpl := waitTemplateBuilt(t, "hostpath")
		t.Logf("accepted; the build ended %s: %s", tpl.State, tpl.Reason)
		if tpl.State != apiv1.TemplateFailed || !strings.Contains(tpl.Reason+strings.Join(tpl.Logs, "\n"), "/nonexistent/image.tar") {
			t.Errorf("admin with a missing archive: %s (%s), want a failed build naming the archive", tpl.State, tpl.Reason)
		}
		if err := env.client.DeleteTemplate(ctx, "hostpath"); err != nil {
			t.Error(err)
		}
	case !errorsAs(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest:
		t.Errorf("admin with a missing archive: %v, want 400", err)
	default:
		t.Logf("refused at submit: %v", err)
		if _, err := env.client.GetTemplate(ctx, "hostpath"); !client.IsNotFound(err) {
			t.Errorf("a refused recipe left a template: %v", err)
		}
	}
}

// waitTemplateBuilt waits until the template's build ended, ready or
// failed.
func waitTemplateBuilt(t *testing.T, name string) *apiv1.Template {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		tpl, err := env.client.GetTemplate(testContext(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if tpl.State == apiv1.TemplateReady || tpl.State == apiv1.TemplateFailed {
			return tpl
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the build of template %s did not end in time", name)
	return nil
}

// An archive uploaded with the recipe builds (CLI, admin key), with the
// build log's progress streamed; its run step ran in gVisor, not on the
// host; a non-admin key uploads the same image.
func TestTemplateUploadedArchive(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(archive, busyboxImage(t), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "recipe.yaml")
	// A step of this run (its marker): the build cache, which outlives
	// runs, would otherwise hand over an earlier run's build, whose steps
	// run no more.
	step := fmt.Sprintf("cat /proc/version > /etc/build-kernel; hostname > /etc/build-host; echo step-output-line of run %d", time.Now().UnixNano())
	os.WriteFile(recipe, []byte("name: uploaded\nfrom: upload\nuser: root\nrun:\n  - "+step+"\n"), 0o644)
	stdout, stderr, code := space(t, "", "template", "build", "-f", recipe, "--archive", archive)
	if code != 0 {
		t.Fatalf("space template build --archive: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// [n/total] progress; total counts the egress CA step of the harness.
	for _, want := range []string{"[1/4] import image uploaded archive (1 layers)", "starting the build sandbox", "[2/4] run: cat /proc/version", "step-output-line", "[4/4] finalize"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("build output lacks %q:\n%s", want, stdout)
		}
	}
	tpl := waitTemplate(t, "uploaded")

	// The log stream of GET /v1/templates/{name}/logs replays the same
	// progress and ends with the ready template.
	lines := followTemplateLog(ctx, t, env.client, "uploaded")
	if log := strings.Join(lines, "\n"); !strings.Contains(log, "[2/4] run:") || !strings.Contains(log, "step-output-line") {
		t.Errorf("streamed log:\n%s", log)
	}

	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "uploaded"})
	hostKernel, _ := os.ReadFile("/proc/version")
	buildKernel := execOK(t, sb.ID, "cat /etc/build-kernel")
	if strings.TrimSpace(buildKernel) == strings.TrimSpace(string(hostKernel)) || buildKernel == "" {
		t.Errorf("the build step saw the host kernel %q: it did not run in gVisor", buildKernel)
	}
	if host := execOK(t, sb.ID, "cat /etc/build-host"); strings.TrimSpace(host) != "space-build" {
		t.Errorf("build step hostname %q", host)
	}

	// Uploads are for every key; the same image is the same template.
	f, _ := os.Open(archive)
	defer f.Close()
	info, _ := f.Stat()
	again, err := userClient(t).CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: "uploaded-again", Recipe: "from: upload\nuser: root\nrun:\n  - " + step + "\n"}, f, info.Size())
	if err != nil || again.ID != tpl.ID || again.State != apiv1.TemplateReady {
		t.Errorf("non-admin upload of the same image: %+v, %v", again, err)
	}
	env.client.DeleteSandbox(ctx, sb.ID)
	for _, name := range []string{"uploaded-again", "uploaded"} {
		if err := env.client.DeleteTemplate(ctx, name); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete %s: %v", name, err)
		}
	}
}

// An archive over the server's limit is refused with 413 and a message
// naming the limit, and leaves nothing behind on the server.
func TestTemplateUploadOverLimit(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	big := make([]byte, e2eMaxArchive+4<<20)
	rand.Read(big)
	_, err := userClient(t).CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: "too-big", Recipe: "from: upload\n"}, bytes.NewReader(big), int64(len(big)))
	var apiErr *client.APIError
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(apiErr.Message, "limit") {
		t.Fatalf("oversized upload: %v, want 413 naming the limit", err)
	}
	t.Logf("refused: %s", apiErr.Message)
	// Without a declared length the limit holds while streaming.
	_, err = userClient(t).CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: "too-big", Recipe: "from: upload\n"}, io.MultiReader(bytes.NewReader(big)), -1)
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized streamed upload: %v, want 413", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(env.dataDir, "cache", "uploads")); len(entries) != 0 {
		t.Errorf("%d uploads left on the server", len(entries))
	}
	if _, err := env.client.GetTemplate(ctx, "too-big"); !client.IsNotFound(err) {
		t.Errorf("refused upload left a template: %v", err)
	}

	// The recipe must come first, so that a bad one is refused before
	// the archive is stored.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("archive", "image.tar")
	fw.Write([]byte("not read"))
	mw.WriteField("recipe", "from: upload\n")
	mw.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.URL+"/v1/templates", &body)
	req.Header.Set("Authorization", "Bearer "+env.srv.AdminKey)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "must come before") {
		t.Errorf("archive before recipe: %d %s", resp.StatusCode, msg)
	}
}

// userClient is a non-admin key's client, revoked when the test ends.
func userClient(t *testing.T) *client.Client {
	t.Helper()
	key, err := env.client.CreateKey(testContext(t), apiv1.CreateKeyRequest{Name: "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.client.RevokeKey(context.Background(), key.ID) })
	return client.New(env.srv.URL, key.Key)
}

func errorsAs(err error, target **client.APIError) bool {
	e, ok := err.(*client.APIError)
	if ok {
		*target = e
	}
	return ok
}

// busyboxImage is a docker-save archive of one layer: the host's static
// busybox as /bin/busybox and /bin/sh, and an /etc with root.
func busyboxImage(t *testing.T) []byte {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("no /bin/busybox on the host")
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, e := range []struct {
		name, link string
		body       []byte
		typ        byte
		mode       int64
	}{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "bin/busybox", body: bb, typ: tar.TypeReg, mode: 0o755},
		{name: "bin/sh", link: "busybox", typ: tar.TypeSymlink, mode: 0o777},
		{name: "bin/cat", link: "busybox", typ: tar.TypeSymlink, mode: 0o777},
		{name: "bin/hostname", link: "busybox", typ: tar.TypeSymlink, mode: 0o777},
		{name: "bin/echo", link: "busybox", typ: tar.TypeSymlink, mode: 0o777},
		{name: "etc/passwd", body: []byte("root:x:0:0:root:/root:/bin/sh\n"), typ: tar.TypeReg, mode: 0o644},
		{name: "etc/group", body: []byte("root:x:0:\n"), typ: tar.TypeReg, mode: 0o644},
	} {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if err := lw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		lw.Write(e.body)
	}
	lw.Close()
	config, _ := json.Marshal(map[string]any{"config": map[string]any{"Env": []string{"PATH=/bin"}}})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "Layers": []string{"layer.tar"}}})
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		body []byte
	}{{"layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		w.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0)})
		w.Write(f.body)
	}
	w.Close()
	return out.Bytes()
}

// Build steps have the network a default sandbox has: names resolve
// through the slot's gateway and the (fake) internet answers, so apt and
// downloads work, while the host stays closed (TestTemplateBuildEscapesAreBlocked).
func TestTemplateBuildStepsHaveNetwork(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	// busybox's resolver and nc: its static wget crashes in gVisor.
	recipe := `name: fetched
from: template:minimal
run:
  - |
    ip=$(nslookup ` + nettest.OtherName + ` | awk '/^Address: / {a=$2} END {print a}'); printf 'GET / HTTP/1.0\r\nHost: ` + nettest.OtherName + `\r\n\r\n' | nc -w 10 "$ip" 80 > /etc/fetched
`
	if _, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe}); err != nil {
		t.Fatal(err)
	}
	waitTemplate(t, "fetched")
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "fetched"})
	if got := execOK(t, sb.ID, "cat /etc/fetched"); !strings.Contains(got, "host="+nettest.OtherName) {
		t.Errorf("the build step fetched %q", got)
	}
	env.client.DeleteSandbox(ctx, sb.ID)
	if err := env.client.DeleteTemplate(ctx, "fetched"); err != nil {
		t.Errorf("delete: %v", err)
	}
}

// followTemplateLog reads template name's build log from its first line
// until the stream's done event, which must carry the ready template.
func followTemplateLog(ctx context.Context, t *testing.T, c *client.Client, name string) []string {
	t.Helper()
	stream, err := c.TemplateLogs(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var lines []string
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("follow the build log of %s: %v (so far %q)", name, err, lines)
		}
		if ev.Done {
			if ev.Template.State != apiv1.TemplateReady {
				t.Fatalf("the build log of %s ended with %+v", name, ev.Template)
			}
			return lines
		}
		lines = append(lines, ev.Line)
	}
}

// A project's builds count against its quota (issue 31): with room for
// one sandbox, a second build while the first runs answers 429 naming
// the quota. And a build step, which runs as root like the agent, finds
// no token in the agent's /proc/1/environ, which it can read.
func TestTemplateBuildsChargedAndTokenHidden(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	proj := fmt.Sprintf("builds-%d", time.Now().UnixNano()%1e9)
	one, mem := 1, 2048
	if _, err := env.client.SetProjectQuota(ctx, proj, apiv1.QuotaSettings{MaxSandboxes: &one, MaxMemoryMB: &mem}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.client.SetProjectQuota(context.Background(), proj, apiv1.QuotaSettings{}) })
	key, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: proj, Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.client.RevokeKey(context.Background(), key.ID) })
	user := client.New(env.srv.URL, key.Key)

	// The project's name makes the recipe new: a build cached from an
	// earlier run would run no step.
	recipe := `name: environ
from: template:minimal
run:
  - echo "environ readable=$(tr '\0' '\n' < /proc/1/environ | grep -c '^PATH=') token=$(tr '\0' '\n' < /proc/1/environ | grep -c '^SPACE_AGENT_TOKEN=')"
  - sleep 3; echo ` + proj + `
`
	if _, err := user.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { user.DeleteTemplate(context.Background(), "environ") })
	_, err = user.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: "name: second\nfrom: template:minimal\nrun:\n  - true\n"})
	var apiErr *client.APIError
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || !strings.Contains(apiErr.Message, "sandboxes") {
		t.Errorf("a second build while the first runs, in a project of 1 sandbox: %v, want 429 naming the quota", err)
	}

	tpl := waitTemplateBuilt(t, proj+"/environ") // an admin key names another project's template so
	log := strings.Join(tpl.Logs, "\n")
	if tpl.State != apiv1.TemplateReady || !strings.Contains(log, "environ readable=1 token=0") {
		t.Errorf("the build (%s, %s) logged:\n%s", tpl.State, tpl.Reason, log)
	}
	// Its build sandbox went with it: the project's place is free again.
	if _, err := user.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: "name: second\nfrom: template:minimal\nrun:\n  - true\n"}); err != nil {
		t.Errorf("a build once the first ended: %v", err)
	} else {
		waitTemplateBuilt(t, proj+"/second")
		t.Cleanup(func() { user.DeleteTemplate(context.Background(), "second") })
	}
}
