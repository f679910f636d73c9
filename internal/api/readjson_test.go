package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Invalid UTF-8 in a JSON body is refused, not stored as U+FFFD.
func TestReadJSONRefusesInvalidUTF8(t *testing.T) {
	s := &Server{cfg: Config{MaxJSONBody: 1 << 20}}
	for body, wantOK := range map[string]bool{
		"{\"name\":\"caf\xc3\xa9\"}": true,
		"{\"name\":\"caf\xe9\"}":     false,
		"{\"name\":\"a\"}" + "\xff":  false,
	} {
		var v struct{ Name string }
		w := httptest.NewRecorder()
		ok := s.readJSON(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &v)
		if ok != wantOK {
			t.Errorf("%q: ok %v, want %v (%d %s)", body, ok, wantOK, w.Code, w.Body)
		}
		if !wantOK && (w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "UTF-8")) {
			t.Errorf("%q: %d %s, want 400 naming UTF-8", body, w.Code, w.Body)
		}
	}
}
