package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// call sends a raw request and decodes the JSON error body when there is one.
func call(t *testing.T, method, path, key string, body io.Reader) (int, apiv1.Error) {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, env.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e apiv1.Error
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(data, &e); err != nil || e.Code != resp.StatusCode || e.Message == "" {
			t.Errorf("%s %s: status %d with body %q, want {\"code\",\"message\"}", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode, e
}

func TestBadInputGetsDocumentedStatusAndChangesNothing(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	key := env.srv.AdminKey
	before := sandboxIDs(t)
	huge := strings.Repeat("x", 2<<20)
	unknown := "/v1/sandboxes/doesnotexist0000000000"
	cases := []struct {
		name, method, path, body string
		key                      string
		want                     int
	}{
		{"no key", "GET", "/v1/sandboxes", "", "-", 401},
		{"wrong key", "GET", "/v1/sandboxes", "", "e2b_0000000000000000000000000000000000000000", 401},
		{"malformed JSON", "POST", "/v1/sandboxes", `{"template": "minimal"`, "", 400},
		{"not an object", "POST", "/v1/sandboxes", `[1,2]`, "", 400},
		{"unknown field", "POST", "/v1/sandboxes", `{"template":"minimal","vcpu":1}`, "", 400},
		{"empty body", "POST", "/v1/sandboxes", ``, "", 400},
		{"oversized body", "POST", "/v1/sandboxes", `{"template":"minimal","metadata":{"a":"` + huge + `"}}`, "", 413},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"no-such-template"}`, "", 404},
		{"negative vcpus", "POST", "/v1/sandboxes", `{"template":"minimal","vcpus":-1}`, "", 400},
		{"more vcpus than the node", "POST", "/v1/sandboxes", `{"template":"minimal","vcpus":4096}`, "", 422},
		{"more memory than the node", "POST", "/v1/sandboxes", `{"template":"minimal","memory_mb":100000000}`, "", 422},
		{"unknown sandbox", "GET", unknown, "", "", 404},
		{"delete unknown", "DELETE", unknown, "", "", 404},
		{"exec unknown", "POST", unknown + "/exec", `{"cmd":["true"]}`, "", 404},
		{"timeout unknown", "POST", unknown + "/timeout", `{"timeout_s":10}`, "", 404},
		{"bad timeout", "POST", "/v1/sandboxes/" + sb.ID + "/timeout", `{"timeout_s":-5}`, "", 400},
		{"empty cmd", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"cmd":[]}`, "", 400},
		{"missing path", "GET", "/v1/sandboxes/" + sb.ID + "/files", "", "", 400},
		{"NUL in path", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/tmp/a%00b", "", "", 400},
		{"missing file", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/no/such/file", "", "", 404},
		{"unknown session", "GET", "/v1/sandboxes/" + sb.ID + "/sessions/nope", "", "", 404},
		{"bad resume offset", "GET", "/v1/sandboxes/" + sb.ID + "/sessions/nope/attach?from=-1", "", "", 404},
		{"unknown signal", "POST", "/v1/sandboxes/" + sb.ID + "/sessions/nope/signal", `{"signal":"SIGNOPE"}`, "", 400},
		{"bad wait timeout", "GET", "/v1/sandboxes/" + sb.ID + "/wait?timeout_s=soon", "", "", 400},
		{"unknown route", "GET", "/v1/nothing", "", "", 404},
		{"wrong method", "PATCH", "/v1/sandboxes", "", "", 405},
		{"bad recipe", "POST", "/v1/templates", `{"recipe":"from: [unclosed"}`, "", 400},
		{"unknown template get", "GET", "/v1/templates/nope", "", "", 404},
	}
	for _, c := range cases {
		k := key
		if c.key == "-" {
			k = ""
		} else if c.key != "" {
			k = c.key
		}
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		if got, e := call(t, c.method, c.path, k, body); got != c.want {
			t.Errorf("%s: %s %s = %d (%s), want %d", c.name, c.method, c.path, got, e.Message, c.want)
		}
	}
	if after := sandboxIDs(t); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("bad requests changed the sandbox list: %v → %v", before, after)
	}
	// The sandbox still works after all that.
	execOK(t, sb.ID, "true")
}

func TestWrongStateIs409(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	// A template whose ready check never passes keeps its sandbox starting.
	recipe := "name: never-ready\nfrom: template:minimal\nready: \"false\"\n"
	tpl, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: recipe})
	if err != nil {
		t.Fatal(err)
	}
	waitTemplate(t, tpl.Name)
	sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "never-ready"})
	if err != nil {
		t.Fatal(err)
	}
	code, e := call(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", env.srv.AdminKey, strings.NewReader(`{"cmd":["true"]}`))
	if code != 409 || !strings.Contains(e.Message, "starting") {
		t.Errorf("exec on a starting sandbox = %d %q, want 409 naming the state", code, e.Message)
	}
	if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Second); !client.IsTimeout(err) {
		t.Errorf("wait on a never-ready sandbox: %v, want 408", err)
	}
	// Delete aborts the start instead of waiting for the ready check.
	began := time.Now()
	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("delete of a starting sandbox waited %s", d)
	}
	if _, err := env.client.GetSandbox(ctx, sb.ID); !client.IsNotFound(err) {
		t.Errorf("deleted sandbox still found: %v", err)
	}
	code, e = call(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", env.srv.AdminKey, bytes.NewReader([]byte(`{"cmd":["true"]}`)))
	if code != 404 {
		t.Errorf("exec on a deleted sandbox = %d %q, want 404", code, e.Message)
	}
}

func sandboxIDs(t *testing.T) []string {
	t.Helper()
	list, err := env.client.ListSandboxes(testContext(t), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID+"="+sb.State)
	}
	return ids
}

func waitTemplate(t *testing.T, name string) *apiv1.Template {
	t.Helper()
	tpl := waitTemplateBuilt(t, name)
	if tpl.State == apiv1.TemplateFailed {
		t.Fatalf("template %s failed: %s\n%s", name, tpl.Reason, strings.Join(tpl.Logs, "\n"))
	}
	return tpl
}

// Requests that are the client's fault answer 4xx with the reason, not
// 502 or 500; a full disk is 507; and no error names a host path.
func TestHonestStatusCodes(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	small := newSandbox(t, apiv1.CreateSandboxRequest{DiskMB: 16})
	ctx := testContext(t)
	key := env.srv.AdminKey
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// A root-owned 0755 directory the default user may read but not write.
	if res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{User: "root", Cmd: []string{"/bin/sh", "-c",
		"mkdir -p /srv/rootonly/sub && touch /srv/rootonly/f && chmod 755 /srv/rootonly /srv/rootonly/sub"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("make a root-owned directory: %+v %v", res, err)
	}
	base := "/v1/sandboxes/" + sb.ID
	longKey := strings.Repeat("k", 257)
	var manyMeta []string
	for i := range 65 {
		manyMeta = append(manyMeta, fmt.Sprintf(`"k%d":"v"`, i))
	}
	big := strings.NewReader(strings.Repeat("x", 64<<20))
	cases := []struct {
		name, method, path string
		body               io.Reader
		want               int
		contains           string
	}{
		{"exec unknown user", "POST", base + "/exec", strings.NewReader(`{"cmd":["true"],"user":"nosuch"}`), 400, "nosuch"},
		{"exec missing cwd", "POST", base + "/exec", strings.NewReader(`{"cmd":["true"],"cwd":"/no/such/dir"}`), 400, "/no/such/dir"},
		{"exec missing binary", "POST", base + "/exec", strings.NewReader(`{"cmd":["/no/such/binary"]}`), 400, "/no/such/binary"},
		{"exec NUL in an argument", "POST", base + "/exec", strings.NewReader(`{"cmd":["echo","a\u0000b"]}`), 400, "NUL"},
		{"exec = in an env name", "POST", base + "/exec", strings.NewReader(`{"cmd":["true"],"env":{"A=B":"c"}}`), 400, "env"},
		{"exec NUL in an env value", "POST", base + "/exec", strings.NewReader(`{"cmd":["true"],"env":{"A":"b\u0000c"}}`), 400, "NUL"},
		{"session NUL in an argument", "POST", base + "/sessions", strings.NewReader(`{"cmd":["echo","a\u0000b"]}`), 400, "NUL"},
		{"files as an unknown user", "GET", base + "/files?path=/tmp&user=nosuch", nil, 400, "nosuch"},
		{"write as an unknown user", "PUT", base + "/files?path=/tmp/x&user=nosuch", strings.NewReader("x"), 400, "nosuch"},
		{"wait for a bogus state", "GET", base + "/wait?state=bogus&timeout_s=1", nil, 400, "bogus"},
		{"delete a missing file", "DELETE", base + "/files?path=/no/such/file", nil, 404, "/no/such/file"},
		{"stdin close=maybe", "POST", base + "/sessions/" + sess.ID + "/stdin?close=maybe", nil, 400, "maybe"},
		{"write as user into a root-owned dir", "PUT", base + "/files?path=/srv/rootonly/new&user=user", strings.NewReader("x"), 403, "permission denied"},
		{"overwrite a root-owned file as user", "PUT", base + "/files?path=/srv/rootonly/f&user=user", strings.NewReader("x"), 403, "permission denied"},
		{"mkdir as user in a root-owned dir", "POST", base + "/files/mkdir?user=user", strings.NewReader(`{"path":"/srv/rootonly/d"}`), 403, "permission denied"},
		{"move as user out of a root-owned dir", "POST", base + "/files/move?user=user", strings.NewReader(`{"from":"/srv/rootonly/f","to":"/home/user/stolen"}`), 403, "permission denied"},
		{"delete as user in a root-owned dir", "DELETE", base + "/files?path=/srv/rootonly/f&user=user", nil, 403, "permission denied"},
		// The agent dropped privileges on one thread only: root still writes.
		{"write as root into the root-owned dir", "PUT", base + "/files?path=/srv/rootonly/byroot&user=root", strings.NewReader("x"), 200, ""},
		{"disk quota exceeded", "PUT", "/v1/sandboxes/" + small.ID + "/files?path=/home/user/big", big, 507, ""},
		{"snapshot interval below the floor", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","snapshot_interval_s":` + strconv.Itoa(e2eSnapshotInterval-1) + `}`), 400, "at least " + strconv.Itoa(e2eSnapshotInterval)},
		{"env name with =", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","env":{"A=B":"c"}}`), 400, "env"},
		{"env value with NUL", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","env":{"A":"\u0000"}}`), 400, "NUL"},
		{"metadata with NUL", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","metadata":{"a":"b\u0000"}}`), 400, "NUL"},
		{"metadata key too long", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","metadata":{"` + longKey + `":"v"}}`), 400, "256"},
		{"metadata value too long", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","metadata":{"k":"` + strings.Repeat("v", 2049) + `"}}`), 400, "2048"},
		{"too many metadata entries", "POST", "/v1/sandboxes", strings.NewReader(`{"template":"minimal","metadata":{` + strings.Join(manyMeta, ",") + `}}`), 400, "64"},
	}
	before := sandboxIDs(t)
	var bodies []string
	for _, c := range cases {
		code, e := call(t, c.method, c.path, key, c.body)
		bodies = append(bodies, e.Message)
		if code != c.want || !strings.Contains(e.Message, c.contains) {
			t.Errorf("%s: %s %s = %d %q, want %d mentioning %q", c.name, c.method, c.path, code, e.Message, c.want, c.contains)
		}
	}
	if after := sandboxIDs(t); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("refused creates changed the sandbox list: %v → %v", before, after)
	}
	// Nothing the refused writes named exists; the root-owned file is intact.
	if out := execOK(t, sb.ID, "ls -A /srv/rootonly; cat /srv/rootonly/f; ls /home/user/stolen 2>&1 || true"); strings.TrimSpace(out) != "byroot\nf\nsub\nls: /home/user/stolen: No such file or directory" {
		t.Errorf("after refused writes: %q", out)
	}

	// An unknown sandbox through the proxy, on any port, gets E2B's
	// answer for a sandbox that does not run: 502, "The sandbox was not
	// found" (e2b_sem_test.go checks its exact shape).
	unknown := http.Header{}
	unknown.Set("E2b-Sandbox-Id", "nosuchsandbox0000000")
	unknown.Set("E2b-Sandbox-Port", "8080")
	resp := proxyRequest(t, http.MethodGet, "/", "", nil, unknown)
	resp.wantError(t, http.StatusBadGateway, "The sandbox was not found")
	bodies = append(bodies, string(resp.body))

	// No error names a host path.
	for _, b := range bodies {
		for _, host := range []string{env.dataDir, "/var/lib/space", env.binDir, env.repoRoot, "/var/tmp/"} {
			if host != "" && strings.Contains(b, host) {
				t.Errorf("error %q names the host path %s", b, host)
			}
		}
	}
	execOK(t, sb.ID, "true")
	execOK(t, small.ID, "true")
}
