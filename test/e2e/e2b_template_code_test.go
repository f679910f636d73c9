package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// E2B's template build API, as the SDKs call it, in each house: a build
// requested through one control plane has its files uploaded and is
// followed through the other (the one control plane twice, in one
// house), is built on a node with a copy step and a run step, and a
// sandbox created from its tag has the files. Another project sees none
// of it. E2B's DELETE /templates/{id} refuses a template in use (409),
// then deletes it with its tags. (TestE2BTemplateBuildAPI plays the
// API's malformed and oversized input against one house: that is the
// API's own code, the same in both.)
func TestE2BTemplateFromCode(t *testing.T) {
	inEachHouse(t, e2bTemplateFromCode)
}

func e2bTemplateFromCode(t *testing.T, h *house) {
	ctx := testContext(t)
	// Projects of this run: the shared server's may hold an earlier
	// test's.
	run := time.Now().UnixNano() % 1e9
	projA, projB := fmt.Sprintf("code-tpl-a-%d", run), fmt.Sprintf("code-tpl-b-%d", run)
	keyA, keyB := h.projectKey(t, projA), h.projectKey(t, projB)
	e1, e2 := h.e2bURLs[0], h.e2bURLs[len(h.e2bURLs)-1]

	// Requested through replica 1.
	resp := raw(t, e1, keyA, http.MethodPost, "/v3/templates", `{"name":"app:v1","cpuCount":2,"memoryMB":1024}`)
	var req struct{ BuildID string }
	if resp.status != http.StatusAccepted || json.Unmarshal(resp.body, &req) != nil || req.BuildID == "" {
		t.Fatalf("request a build: %d %s", resp.status, resp.body)
	}

	// Files uploaded through replica 2.
	data, hash := tplFiles(t, map[string]string{"src/one.txt": "one from the client\n", "src/sub/two.txt": "two\n"})
	resp = raw(t, e2, keyA, http.MethodGet, "/templates/app/files/"+hash, "")
	var link struct {
		Present bool
		URL     string
	}
	if resp.status != http.StatusCreated || json.Unmarshal(resp.body, &link) != nil || link.Present || link.URL == "" {
		t.Fatalf("files link: %d %s", resp.status, resp.body)
	}
	if r := raw(t, e1, keyB, http.MethodGet, "/templates/app/files/"+hash, ""); r.status != http.StatusNotFound {
		t.Fatalf("B asks for A's files link: %d %s", r.status, r.body)
	}
	put, _ := http.NewRequestWithContext(ctx, http.MethodPut, link.URL, bytes.NewReader(data))
	if up := do(t, put); up.status != http.StatusOK {
		t.Fatalf("upload: %d %s", up.status, up.body)
	}
	if r := raw(t, e1, keyA, http.MethodGet, "/templates/app/files/"+hash, ""); !strings.Contains(string(r.body), `"present":true`) {
		t.Fatalf("the upload through replica 2 is not present on replica 1: %d %s", r.status, r.body)
	}

	// Triggered through replica 1: a copy step and a run step.
	steps := fmt.Sprintf(`{"fromTemplate":"minimal","steps":[
		{"type":"COPY","args":["src","/app/","",""],"filesHash":%q},
		{"type":"RUN","args":["cat /app/one.txt /app/sub/two.txt > /home/user/ran && echo built-by-run-%d"]}]}`, hash, run)
	build := "/v2/templates/app/builds/" + req.BuildID
	if r := raw(t, e1, keyB, http.MethodPost, build, steps); r.status != http.StatusNotFound {
		t.Fatalf("B triggers A's build: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodPost, build, steps); r.status != http.StatusAccepted {
		t.Fatalf("trigger: %d %s", r.status, r.body)
	}

	// Followed through replica 2 until it ends.
	var lines []string
	status := "/templates/app/builds/" + req.BuildID + "/status"
	for deadline := time.Now().Add(5 * time.Minute); ; {
		r := raw(t, e2, keyA, http.MethodGet, fmt.Sprintf("%s?logsOffset=%d", status, len(lines)), "")
		var st tplStatus
		if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		for _, e := range st.LogEntries {
			lines = append(lines, e.Message)
		}
		if st.Status == "error" {
			t.Fatalf("the build failed: %+v\n%s", st.Reason, strings.Join(lines, "\n"))
		}
		if st.Status == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not end:\n%s", strings.Join(lines, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The step names the run: an earlier run's build would come whole
	// from one house's build cache, its steps not run again.
	if !strings.Contains(strings.Join(lines, "\n"), fmt.Sprintf("built-by-run-%d", run)) {
		t.Fatalf("the run step's output is not in the log:\n%s", strings.Join(lines, "\n"))
	}
	if r := raw(t, e1, keyB, http.MethodGet, status, ""); r.status != http.StatusNotFound {
		t.Fatalf("B reads A's build: %d %s", r.status, r.body)
	}
	r := raw(t, e1, keyA, http.MethodGet, "/templates/app/tags", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"v1"`) || !strings.Contains(string(r.body), req.BuildID) {
		t.Fatalf("tags: %d %s", r.status, r.body)
	}
	if r := raw(t, e2, keyB, http.MethodGet, "/templates/app/tags", ""); r.status != http.StatusNotFound {
		t.Fatalf("B lists A's tags: %d %s", r.status, r.body)
	}

	// A sandbox of the tag has the copied files and what the run made.
	if r := raw(t, e2, keyB, http.MethodPost, "/sandboxes", `{"templateID":"app:v1"}`); r.status != http.StatusNotFound {
		t.Fatalf("B creates from A's template: %d %s", r.status, r.body)
	}
	r = raw(t, e2, keyA, http.MethodPost, "/sandboxes", `{"templateID":"app:v1","timeout":300}`)
	var sb struct{ SandboxID string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &sb) != nil || sb.SandboxID == "" {
		t.Fatalf("create from app:v1: %d %s", r.status, r.body)
	}
	if _, err := h.admin().WaitSandbox(ctx, sb.SandboxID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := h.admin().Exec(ctx, sb.SandboxID, apiv1.ExecRequest{Cmd: []string{"cat", "/app/one.txt", "/app/sub/two.txt", "/home/user/ran"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "one from the client\ntwo\none from the client\ntwo\n" {
		t.Fatalf("the sandbox's files: %+v, %v", res, err)
	}

	// Deleted through E2B's route: never by another project, not while
	// a sandbox uses it, then with its tags.
	if r := raw(t, e1, keyB, http.MethodDelete, "/templates/app", ""); r.status != http.StatusNotFound {
		t.Fatalf("B deletes A's template: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodDelete, "/templates/app", ""); r.status != http.StatusConflict {
		t.Fatalf("delete while a sandbox uses it: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if r := raw(t, e2, keyA, http.MethodDelete, "/templates/app", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodPost, "/sandboxes", `{"templateID":"app:v1"}`); r.status != http.StatusNotFound {
		t.Fatalf("create from a deleted template's tag: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodGet, "/templates/app/tags", ""); r.status != http.StatusNotFound {
		t.Fatalf("tags of a deleted template: %d %s", r.status, r.body)
	}
	if r := raw(t, e1, keyA, http.MethodDelete, "/templates/app", ""); r.status != http.StatusNotFound {
		t.Fatalf("delete again: %d %s", r.status, r.body)
	}
	if _, err := h.admin().GetTemplate(context.Background(), projA+"/app"); err == nil {
		t.Fatal("the native API still has the template")
	}
}
