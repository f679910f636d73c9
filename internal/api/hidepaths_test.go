package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/pkg/apiv1"
)

// Error answers lose host directories; success answers are the sandbox's
// own data (command output, files, env) and pass as they are.
func TestHidePathsRewritesOnlyErrors(t *testing.T) {
	dir := t.TempDir()
	h := HidePaths(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/sandboxes/x/files":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"path":"` + dir + `/x"}`))
			return
		case "/ok":
			w.Write([]byte("content mentions " + dir + "/x"))
			return
		case "/v1/sandboxes/x/exec":
			writeJSON(w, http.StatusOK, map[string]string{"stdout": "echo " + dir + "/x"})
			return
		}
		writeError(w, http.StatusInternalServerError, "create volume "+dir+"/volumes/sandboxes/abc: quota")
	}), hostpath.New(dir))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/fail", nil))
	if body := rec.Body.String(); strings.Contains(body, dir) || !strings.Contains(body, "<host>/volumes/sandboxes/abc: quota") {
		t.Errorf("error body %q", body)
	}
	for _, p := range []string{"/ok", "/v1/sandboxes/x/files", "/v1/sandboxes/x/exec"} {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if body := rec.Body.String(); !strings.Contains(body, dir) {
			t.Errorf("%s: body rewritten: %q", p, body)
		}
	}
}

// Streams (attach, events, logs) flush through the wrapper.
func TestHidePathsKeepsStreamsFlushing(t *testing.T) {
	h := HidePaths(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the wrapped writer is not an http.Flusher")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f.Flush()
	}), hostpath.New(t.TempDir()))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/sandboxes/x/sessions/s/attach", nil))
	if !rec.Flushed {
		t.Error("Flush did not reach the server's writer")
	}
}

// A path the client sent comes back exactly as sent, even under the data
// dir, so that probing with paths cannot find the data dir; the host's own
// paths in the same answer are still hidden.
func TestHidePathsKeepsClientPaths(t *testing.T) {
	dir := t.TempDir()
	h := HidePaths(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Path string }
		if r.Body != nil {
			_ = json.NewDecoder(r.Body).Decode(&req)
		}
		if q := r.URL.Query().Get("path"); q != "" {
			req.Path = q
		}
		writeError(w, http.StatusNotFound, "open "+path.Clean(req.Path)+": no such file (volume "+dir+"/volumes/abc)")
	}), hostpath.New(dir))
	for _, c := range []struct {
		name, query, body, want string
	}{
		{"body", "", `{"path":"` + dir + `/x"}`, dir + "/x"},
		{"escaped body", "", `{"path":"` + strings.ReplaceAll(dir, "/", `\/`) + `\/x"}`, dir + "/x"},
		{"query", "?path=" + url.QueryEscape(dir+"/q"), "", dir + "/q"},
		{"cleaned", "", `{"path":"` + dir + `//a/../b"}`, dir + "/b"},
		{"data dir itself", "", `{"path":"` + dir + `"}`, dir},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/sandboxes/x/files"+c.query, strings.NewReader(c.body))
		h.ServeHTTP(rec, r)
		var got apiv1.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, rec.Body)
		}
		want := "open " + c.want + ": no such file (volume <host>/volumes/abc)"
		if got.Message != want {
			t.Errorf("%s: %q, want %q", c.name, got.Message, want)
		}
	}
}
