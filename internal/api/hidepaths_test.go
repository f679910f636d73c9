package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/hostpath"
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
