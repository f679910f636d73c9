package e2b

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestPauseMemoryOptions(t *testing.T) {
	for _, c := range []struct {
		body       string
		keep, auto *bool
		refused    string
	}{
		{body: `{}`},
		{body: `{"autoPause":true,"autoPauseMemory":true}`},
		{body: `{"autoPause":true,"autoPauseMemory":false}`, keep: ptr(false), auto: ptr(false)},
		{body: `{"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":false}}`, keep: ptr(false), auto: ptr(false)},
		{body: `{"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`, refused: "autoResume"},
		{body: `{"autoPauseMemory":false}`, refused: "autoPause"},
	} {
		var req newSandbox
		if err := json.Unmarshal([]byte(c.body), &req); err != nil {
			t.Fatal(err)
		}
		req.TemplateID = "minimal"
		out, msg := req.request()
		if c.refused != "" {
			if !strings.Contains(msg, c.refused) {
				t.Errorf("%s: message %q, want one naming %s", c.body, msg, c.refused)
			}
			continue
		}
		if msg != "" || !same(out.KeepMemory, c.keep) || (c.auto != nil && !same(out.AutoResume, c.auto)) {
			t.Errorf("%s: keep_memory %v, auto_resume %v, %q", c.body, deref(out.KeepMemory), deref(out.AutoResume), msg)
		}
	}
	if opts := pauseOptions(nil); opts.DropMemory {
		t.Error("a pause without a body drops memory")
	}
	if opts := pauseOptions(ptr(false)); !opts.DropMemory {
		t.Error("memory false keeps memory")
	}
}

func TestUnixParam(t *testing.T) {
	for raw, ok := range map[string]bool{"": true, "0": true, "1700000000": true, "253402300799": true, "253402300800": false, "-1": false, "1.5": false, "x": false, "1e9": false} {
		w := httptest.NewRecorder()
		_, got := unixParam(w, url.Values{"start": {raw}}, "start", apiv1.Sandbox{}.CreatedAt)
		if got != ok {
			t.Errorf("start=%q: ok %v, want %v (%s)", raw, got, ok, w.Body)
		}
		if !ok && (w.Code != 400 || !strings.Contains(w.Body.String(), `"code":400`)) {
			t.Errorf("start=%q answered %d %s", raw, w.Code, w.Body)
		}
	}
}

func ptr(b bool) *bool { return &b }

func same(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
