package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/space-platform/space/internal/template/registrytest"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// E2B's template build API (issue 13, item 12), replayed as the SDKs send
// it: POST /v3/templates, the files link and upload, the v2 trigger with
// steps, build status with logs, and tags. The JS SDKs' own run is
// compat/e2b-js/test/tpl-build.test.mjs, in TestE2BJSSDKs
// (SPACE_E2B_JS_TESTS=test/tpl-build.test.mjs runs it alone).

// tplFiles is a gzipped tar of files, as the SDKs upload a copy's
// sources, and a files hash for it.
func tplFiles(t *testing.T, files map[string]string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for n, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	sum := sha256.Sum256(append([]byte(fmt.Sprint(time.Now().UnixNano())), buf.Bytes()...))
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// tplRequestBuild is POST /v3/templates; it returns the build ID.
func tplRequestBuild(t *testing.T, key, nameTag string) string {
	t.Helper()
	resp := raw(t, env.srv.E2BURL(), key, http.MethodPost, "/v3/templates", fmt.Sprintf(`{"name":%q,"cpuCount":2,"memoryMB":1024}`, nameTag))
	if resp.status != http.StatusAccepted {
		t.Fatalf("request build %s: %d %s", nameTag, resp.status, resp.body)
	}
	var out struct {
		TemplateID, BuildID string
		Names, Tags         []string
	}
	if err := json.Unmarshal(resp.body, &out); err != nil || out.BuildID == "" || len(out.Names) != 1 {
		t.Fatalf("request build: %s (%v)", resp.body, err)
	}
	return out.BuildID
}

// tplUpload asks for the files link and uploads data to it.
func tplUpload(t *testing.T, key, tpl, hash string, data []byte) {
	t.Helper()
	resp := raw(t, env.srv.E2BURL(), key, http.MethodGet, "/templates/"+tpl+"/files/"+hash, "")
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	if resp.status != http.StatusCreated || json.Unmarshal(resp.body, &link) != nil || link.Present || link.URL == "" {
		t.Fatalf("files link: %d %s", resp.status, resp.body)
	}
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPut, link.URL, bytes.NewReader(data))
	if up := do(t, req); up.status != http.StatusOK {
		t.Fatalf("upload: %d %s", up.status, up.body)
	}
	resp = raw(t, env.srv.E2BURL(), key, http.MethodGet, "/templates/"+tpl+"/files/"+hash, "")
	if resp.status != http.StatusCreated || json.Unmarshal(resp.body, &link) != nil || !link.Present {
		t.Fatalf("files after the upload: %d %s", resp.status, resp.body)
	}
}

type tplStatus struct {
	Status     string `json:"status"`
	BuildID    string `json:"buildID"`
	LogEntries []struct {
		Message, Level string
	} `json:"logEntries"`
	Reason *struct {
		Message, Step string
	} `json:"reason"`
}

// String shows the status with its reason's text (a pointer otherwise).
func (s tplStatus) String() string {
	reason := ""
	if s.Reason != nil {
		reason = fmt.Sprintf(", reason %q (step %q)", s.Reason.Message, s.Reason.Step)
	}
	return fmt.Sprintf("build %s: %s%s, %d log entries", s.BuildID, s.Status, reason, len(s.LogEntries))
}

// tplWait polls the build's status, as the SDKs do, until it ends.
func tplWait(t *testing.T, key, tpl, buildID string) (tplStatus, []string) {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		resp := raw(t, env.srv.E2BURL(), key, http.MethodGet, fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", tpl, buildID, len(lines)), "")
		var st tplStatus
		if resp.status != http.StatusOK || json.Unmarshal(resp.body, &st) != nil {
			t.Fatalf("status: %d %s", resp.status, resp.body)
		}
		for _, e := range st.LogEntries {
			lines = append(lines, e.Message)
		}
		if st.Status == "ready" || st.Status == "error" {
			return st, lines
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("build %s did not end:\n%s", buildID, strings.Join(lines, "\n"))
	return tplStatus{}, nil
}

func TestE2BTemplateBuildAPI(t *testing.T) {
	requireServer(t)
	a, b := newTenant(t, "tpl-a"), newTenant(t, "tpl-b")
	keyA, keyB := a.secretKeys[0], b.secretKeys[0]
	e2bURL := env.srv.E2BURL()
	tpl := fmt.Sprintf("tplgo-%d", os.Getpid())
	buildID := tplRequestBuild(t, keyA, tpl+":t1")
	data, hash := tplFiles(t, map[string]string{"dir/a.txt": "file a\n", "dir/b/c.txt": "file c\n", "one.txt": "one\n"})
	oneData, oneHash := tplFiles(t, map[string]string{"one.txt": "one\n"})

	t.Run("uploads", func(t *testing.T) {
		// Project B sees neither the template nor its files.
		if resp := raw(t, e2bURL, keyB, http.MethodGet, "/templates/"+tpl+"/files/"+hash, ""); resp.status != http.StatusNotFound {
			t.Errorf("B asks for A's files link: %d %s", resp.status, resp.body)
		}
		tplUpload(t, keyA, tpl, hash, data)
		tplUpload(t, keyA, tpl, oneHash, oneData)
		// A forged link, another project's, a huge body: refused.
		resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/files/"+strings.Repeat("0", 64), "")
		var link struct{ URL string }
		json.Unmarshal(resp.body, &link)
		for what, u := range map[string]string{
			"forged token":     strings.Replace(link.URL, "token=", "token=00", 1),
			"another project":  strings.Replace(link.URL, "project="+a.project, "project="+b.project, 1),
			"another hash":     strings.Replace(link.URL, strings.Repeat("0", 64), strings.Repeat("1", 64), 1),
			"no token at all":  e2bURL + "/templates/" + tpl + "/files/" + strings.Repeat("0", 64),
			"a changed expiry": strings.Replace(link.URL, "expires=", "expires=1", 1),
		} {
			req, _ := http.NewRequestWithContext(testContext(t), http.MethodPut, u, strings.NewReader("x"))
			if r := do(t, req); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "upload link") {
				t.Errorf("upload with %s: %d %s, want 403", what, r.status, r.body)
			}
		}
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodPut, link.URL, io.LimitReader(zeros{}, e2eMaxArchive+1))
		req.ContentLength = e2eMaxArchive + 1
		r := do(t, req)
		r.wantError(t, http.StatusRequestEntityTooLarge, "at most")
		// Streamed without a length: cut at the limit.
		req, _ = http.NewRequestWithContext(testContext(t), http.MethodPut, link.URL, io.NopCloser(io.LimitReader(zeros{}, e2eMaxArchive+1)))
		req.ContentLength = -1
		do(t, req).wantError(t, http.StatusRequestEntityTooLarge, "larger than")
		if resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/files/"+strings.Repeat("0", 64), ""); !strings.Contains(string(resp.body), `"present":false`) {
			t.Errorf("a refused upload is present: %s", resp.body)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/files/not-a-hash", ""); resp.status != http.StatusBadRequest {
			t.Errorf("files link of a malformed hash: %d %s", resp.status, resp.body)
		}
	})

	t.Run("malformed builds are 400", func(t *testing.T) {
		path := "/v2/templates/" + tpl + "/builds/" + buildID
		for body, want := range map[string]string{
			``:                                     "needs a body",
			`{"steps":[]}`:                         "exactly one of fromImage and fromTemplate",
			`{"fromImage":"x","fromTemplate":"y"}`: "exactly one of fromImage and fromTemplate",
			`{"fromTemplate":"minimal","steps":[{"type":"EXPLODE","args":["x"]}]}`:                                                 "unknown step type",
			`{"fromTemplate":"minimal","steps":[{"type":"RUN","args":[]}]}`:                                                        "a command is required",
			`{"fromTemplate":"minimal","steps":[{"type":"ENV","args":["A"]}]}`:                                                     "name, value pairs",
			`{"fromTemplate":"minimal","steps":[{"type":"ENV","args":["1BAD","v"]}]}`:                                              "invalid variable name",
			`{"fromTemplate":"minimal","steps":[{"type":"USER","args":["bad user!"]}]}`:                                            "invalid user",
			`{"fromTemplate":"minimal","steps":[{"type":"COPY","args":["a","/b"]}]}`:                                               "filesHash is required",
			`{"fromTemplate":"minimal","steps":[{"type":"COPY","args":["../x","/b"],"filesHash":"` + hash + `"}]}`:                 "leaves the archive",
			`{"fromTemplate":"minimal","steps":[{"type":"COPY","args":["a","/b"],"filesHash":"` + strings.Repeat("2", 64) + `"}]}`: "were not uploaded",
			`{"fromTemplate":"no-such-template"}`:                                                                                  "not found",
			`{"fromImage":"NOT A REF"}`:                                                                                            "invalid image reference",
			`{"fromImage":"alpine","fromImageRegistry":{"type":"aws"}}`:                                                            "AWS ECR",
			`{"fromTemplate":"minimal","steps":"nope"}`:                                                                            "malformed JSON",
		} {
			resp := raw(t, e2bURL, keyA, http.MethodPost, path, body)
			e2bResponse{status: resp.status, body: resp.body}.wantError(t, http.StatusBadRequest, want)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodPost, path, `{"fromTemplate":"minimal","steps":[{"type":"RUN","args":["`+strings.Repeat("x", 2<<20)+`"]}]}`); resp.status != http.StatusRequestEntityTooLarge {
			t.Errorf("a 2 MiB step: %d %s", resp.status, resp.body)
		}
		// Another project's build is not found, with A's key and B's.
		if resp := raw(t, e2bURL, keyB, http.MethodPost, path, `{"fromTemplate":"minimal"}`); resp.status != http.StatusNotFound {
			t.Errorf("B triggers A's build: %d %s", resp.status, resp.body)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/builds/"+strings.Repeat("0", 8)+"/status", ""); resp.status != http.StatusNotFound {
			t.Errorf("status of a missing build: %d %s", resp.status, resp.body)
		}
	})

	t.Run("build from minimal", func(t *testing.T) {
		body := map[string]any{
			"fromTemplate": "minimal",
			"startCmd":     "echo started > /tmp/started; exec sleep 3600",
			"readyCmd":     "[ -f /tmp/started ]",
			"steps": []map[string]any{
				// A value of this run: the steps run for real each time, not
				// from an earlier run's template of the same content.
				{"type": "ENV", "args": []string{"RUN_ID", fmt.Sprint(time.Now().UnixNano())}},
				{"type": "USER", "args": []string{"root"}},
				{"type": "WORKDIR", "args": []string{"/srv"}},
				{"type": "COPY", "args": []string{"dir", "app/", "user", "0750"}, "filesHash": hash},
				{"type": "COPY", "args": []string{"one.txt", "/etc/one.conf", "", ""}, "filesHash": oneHash},
				{"type": "ENV", "args": []string{"GREETING", "hi there", "OTHER", "x"}},
				{"type": "RUN", "args": []string{`echo "$GREETING/$(id -un)/$(pwd)" > /srv/built`}},
				{"type": "RUN", "args": []string{`id -un > "$HOME/as-user"; echo "$HOME" >> "$HOME/as-user"`, "user"}},
				{"type": "WORKDIR", "args": []string{"app"}},
				{"type": "USER", "args": []string{"user"}},
			},
		}
		data, _ := json.Marshal(body)
		resp := raw(t, e2bURL, keyA, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+buildID, string(data))
		if resp.status != http.StatusAccepted {
			t.Fatalf("trigger: %d %s", resp.status, resp.body)
		}
		// A build runs once.
		raw2 := raw(t, e2bURL, keyA, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+buildID, string(data))
		e2bResponse{status: raw2.status, body: raw2.body}.wantError(t, http.StatusBadRequest, "started already")
		st, lines := tplWait(t, keyA, tpl, buildID)
		if st.Status != "ready" || st.BuildID != buildID {
			t.Fatalf("build: %+v\n%s", st, strings.Join(lines, "\n"))
		}
		all := strings.Join(lines, "\n")
		for _, want := range []string{"starting the build sandbox", "copy dir -> app/", "run: echo"} {
			if !strings.Contains(all, want) {
				t.Errorf("logs lack %q:\n%s", want, all)
			}
		}
		if strings.Contains(all, env.dataDir) {
			t.Errorf("logs name the server's data dir:\n%s", all)
		}
		// The logs route pages the same lines.
		resp = raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/builds/"+buildID+"/logs?cursor=1&limit=2", "")
		var page struct {
			Logs []struct{ Message, Level string } `json:"logs"`
		}
		if resp.status != http.StatusOK || json.Unmarshal(resp.body, &page) != nil || len(page.Logs) != 2 || page.Logs[0].Message != lines[1] || page.Logs[1].Level != "info" {
			t.Errorf("logs page: %d %s", resp.status, resp.body)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/builds/"+buildID+"/logs?limit=-1", ""); resp.status != http.StatusBadRequest {
			t.Errorf("logs with a negative limit: %d %s", resp.status, resp.body)
		}

		for _, ref := range []string{tpl, tpl + ":t1"} {
			sb := newSandboxAs(t, a.clients[0], apiv1.CreateSandboxRequest{Template: ref})
			got := execAs(t, a.clients[0], sb.ID, `cat /srv/built /home/user/as-user /etc/one.conf /srv/app/a.txt /srv/app/b/c.txt; `+
				`stat -c "%u %a" /srv/app/a.txt /etc/one.conf; echo "$GREETING"; id -un; pwd; cat /tmp/started`)
			want := "hi there/root//srv\nuser\n/home/user\none\nfile a\nfile c\n1000 750\n0 644\nhi there\nuser\n/srv/app\nstarted\n"
			if got != want {
				t.Errorf("sandbox of %s:\n%s\nwant:\n%s", ref, got, want)
			}
		}
		// Project B can neither create from it nor build on it.
		if _, err := b.clients[0].CreateSandbox(testContext(t), apiv1.CreateSandboxRequest{Template: tpl}); !isStatus(err, http.StatusNotFound) {
			t.Errorf("B creates from A's template: %v", err)
		}
		if resp := raw(t, e2bURL, keyB, http.MethodPost, "/sandboxes", `{"templateID":"`+tpl+`:t1"}`); resp.status != http.StatusNotFound {
			t.Errorf("B creates from A's tag over E2B: %d %s", resp.status, resp.body)
		}
		bBuild := tplRequestBuild(t, keyB, "tplgo-b")
		resp = raw(t, e2bURL, keyB, http.MethodPost, "/v2/templates/tplgo-b/builds/"+bBuild, `{"fromTemplate":"`+tpl+`"}`)
		e2bResponse{status: resp.status, body: resp.body}.wantError(t, http.StatusBadRequest, "not found")
		for _, p := range []string{"/templates/" + tpl + "/tags", "/templates/" + tpl + "/builds/" + buildID + "/status"} {
			if resp := raw(t, e2bURL, keyB, http.MethodGet, p, ""); resp.status != http.StatusNotFound {
				t.Errorf("B reads %s: %d %s", p, resp.status, resp.body)
			}
		}
		// B's copy of the same files hash is B's own: not present.
		if resp := raw(t, e2bURL, keyB, http.MethodGet, "/templates/tplgo-b/files/"+hash, ""); !strings.Contains(string(resp.body), `"present":false`) {
			t.Errorf("B sees A's uploaded files: %s", resp.body)
		}
	})

	t.Run("tags", func(t *testing.T) {
		resp := raw(t, e2bURL, keyA, http.MethodPost, "/templates/tags", `{"target":"`+tpl+`:t1","tags":["prod"]}`)
		if resp.status != http.StatusCreated || !strings.Contains(string(resp.body), buildID) {
			t.Fatalf("assign: %d %s", resp.status, resp.body)
		}
		resp = raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/tags", "")
		var tags []struct{ Tag, BuildID string }
		if json.Unmarshal(resp.body, &tags) != nil || len(tags) != 2 || tags[0].Tag != "prod" || tags[1].Tag != "t1" || tags[0].BuildID != buildID {
			t.Errorf("tags: %s", resp.body)
		}
		if resp := raw(t, e2bURL, keyB, http.MethodDelete, "/templates/tags", `{"name":"`+tpl+`","tags":["prod"]}`); resp.status != http.StatusNotFound {
			t.Errorf("B removes A's tag: %d %s", resp.status, resp.body)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodDelete, "/templates/tags", `{"name":"`+tpl+`","tags":["prod"]}`); resp.status != http.StatusNoContent {
			t.Errorf("remove: %d %s", resp.status, resp.body)
		}
		if _, err := a.clients[0].CreateSandbox(testContext(t), apiv1.CreateSandboxRequest{Template: tpl + ":prod"}); !isStatus(err, http.StatusNotFound) {
			t.Errorf("create from a removed tag: %v", err)
		}
		// Tags are not templates of their own in the native list.
		list, err := a.clients[0].ListTemplates(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list {
			if strings.Contains(l.Name, ":") {
				t.Errorf("native list shows the tag %s", l.Name)
			}
		}
	})

	t.Run("build records and tags survive a restart", func(t *testing.T) {
		restartServer(t)
		st, _ := tplWait(t, keyA, tpl, buildID)
		if st.Status != "ready" {
			t.Errorf("status after a restart: %+v", st)
		}
		resp := raw(t, env.srv.E2BURL(), keyA, http.MethodGet, "/templates/"+tpl+"/tags", "")
		if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"tag":"t1"`) || !strings.Contains(string(resp.body), buildID) {
			t.Errorf("tags after a restart: %d %s", resp.status, resp.body)
		}
		e2bURL = env.srv.E2BURL()
	})

	t.Run("a failing step names its step", func(t *testing.T) {
		id := tplRequestBuild(t, keyA, tpl+"-fails")
		resp := raw(t, e2bURL, keyA, http.MethodPost, "/v2/templates/"+tpl+"-fails/builds/"+id,
			`{"fromTemplate":"minimal","steps":[{"type":"ENV","args":["A","1"]},{"type":"RUN","args":["true"]},{"type":"RUN","args":["echo failing; exit 4"]}]}`)
		if resp.status != http.StatusAccepted {
			t.Fatalf("trigger: %d %s", resp.status, resp.body)
		}
		st, lines := tplWait(t, keyA, tpl+"-fails", id)
		if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "exit status 4") || st.Reason.Step != "3" {
			t.Errorf("failed build: %+v\n%s", st, strings.Join(lines, "\n"))
		}
	})

	t.Run("deleting the template takes its tags", func(t *testing.T) {
		ca := client.New(env.srv.URL, keyA) // the server restarted on another port
		deadline := time.Now().Add(time.Minute)
		for {
			err := ca.DeleteTemplate(testContext(t), tpl)
			if err == nil {
				break
			}
			if !isStatus(err, http.StatusConflict) || time.Now().After(deadline) {
				t.Fatalf("delete %s: %v", tpl, err)
			}
			time.Sleep(time.Second) // its sandboxes are still going
		}
		if _, err := ca.CreateSandbox(testContext(t), apiv1.CreateSandboxRequest{Template: tpl + ":t1"}); !isStatus(err, http.StatusNotFound) {
			t.Errorf("create from a tag of a deleted template: %v", err)
		}
		if resp := raw(t, e2bURL, keyA, http.MethodGet, "/templates/"+tpl+"/tags", ""); resp.status != http.StatusOK || string(bytes.TrimSpace(resp.body)) != "[]" {
			t.Errorf("tags of a deleted template: %d %s", resp.status, resp.body)
		}
	})
}

// zeros reads zero bytes for ever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// tplRegistry serves a registry on the loopback that wants basic auth
// u:p, holding a busybox image at tools/busybox:1.
func tplRegistry(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox on the host to make an image of")
	}
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, applet := range []string{"sh", "cat", "echo", "id", "awk", "mkdir", "tar", "cp", "rm", "chown", "chmod", "ls", "sleep", "stat", "basename", "dirname", "su", "env", "true"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	tw.WriteHeader(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))})
	tw.Write([]byte(passwd))
	tw.Close()
	reg := registrytest.Start(t, "u", tplRegistryPassword)
	reg.Push(t, "tools/busybox:1", [][]byte{buf.Bytes()}, v1.Config{Env: []string{"PATH=/bin", "IMAGE_ENV=from-the-image"}, WorkingDir: "/"})
	return reg.Host
}

// tplRegistryPassword is the password of tplRegistry's registry, which
// no record of the server may hold.
const tplRegistryPassword = "registry-p4ss-kept-nowhere"

func TestE2BTemplateFromImage(t *testing.T) {
	requireServer(t)
	a := newTenant(t, "tpl-img")
	key := a.secretKeys[0]
	host := tplRegistry(t)
	tpl := fmt.Sprintf("tplimg-%d", os.Getpid())
	trigger := func(body string) tplStatus {
		id := tplRequestBuild(t, key, tpl)
		resp := raw(t, env.srv.E2BURL(), key, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+id, body)
		if resp.status != http.StatusAccepted {
			return tplStatus{Status: "refused", Reason: &struct{ Message, Step string }{Message: string(resp.body)}}
		}
		st, _ := tplWait(t, key, tpl, id)
		return st
	}
	image := host + "/tools/busybox:1"
	// Refused when the build is triggered (serve), or failed once it runs
	// (a cluster's control plane, which pulls on the node): either way
	// the registry's refusal is the reason.
	if st := trigger(`{"fromImage":"` + image + `"}`); st.Status != "refused" && st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "UNAUTHORIZED") {
		t.Errorf("without credentials: %s", st)
	}
	st := trigger(`{"fromImage":"` + image + `","fromImageRegistry":{"type":"registry","username":"u","password":"` + tplRegistryPassword + `"},` +
		`"steps":[{"type":"RUN","args":["echo \"$IMAGE_ENV\" > /from-image; echo ` + fmt.Sprint(time.Now().UnixNano()) + ` > /run-id"]}]}`)
	if st.Status != "ready" {
		t.Fatalf("build from the image: %+v", st)
	}
	sb := newSandboxAs(t, a.clients[0], apiv1.CreateSandboxRequest{Template: tpl})
	if got := execAs(t, a.clients[0], sb.ID, "cat /from-image; echo $IMAGE_ENV"); got != "from-the-image\nfrom-the-image\n" {
		t.Errorf("sandbox from the image: %q", got)
	}
	// The password is in no record the server keeps: the store's
	// (state.db), nor the build records of serve before one house (e2b/).
	var kept []string
	for _, path := range []string{filepath.Join(env.dataDir, "e2b"), filepath.Join(env.dataDir, "state.db")} {
		if _, err := os.Stat(path); err == nil {
			kept = append(kept, path)
		}
	}
	out, _ := exec.Command("grep", append([]string{"-rla", tplRegistryPassword}, kept...)...).CombinedOutput()
	if len(kept) == 0 || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("build records hold the registry password (searched %v): %s", kept, out)
	}
}
