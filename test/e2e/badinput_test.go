package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
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
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		tpl, err := env.client.GetTemplate(testContext(t), name)
		if err != nil {
			t.Fatal(err)
		}
		switch tpl.State {
		case apiv1.TemplateReady:
			return tpl
		case apiv1.TemplateFailed:
			t.Fatalf("template %s failed: %s\n%s", name, tpl.Reason, strings.Join(tpl.Logs, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("template %s not ready in time", name)
	return nil
}
