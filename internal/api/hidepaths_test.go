package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHidePathsRewritesOnlyErrors(t *testing.T) {
	dir := t.TempDir()
	h := HidePaths(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			w.Write([]byte("content mentions " + dir + "/x"))
			return
		}
		writeError(w, http.StatusInternalServerError, "create volume "+dir+"/volumes/sandboxes/abc: quota")
	}), dir)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/fail", nil))
	if body := rec.Body.String(); strings.Contains(body, dir) || !strings.Contains(body, "<host>/volumes/sandboxes/abc: quota") {
		t.Errorf("error body %q", body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ok", nil))
	if body := rec.Body.String(); !strings.Contains(body, dir) {
		t.Errorf("success body rewritten: %q", body)
	}
}
