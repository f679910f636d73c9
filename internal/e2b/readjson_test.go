package e2b

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Invalid UTF-8 in a JSON body is refused, not stored as U+FFFD.
func TestReadJSONRefusesInvalidUTF8(t *testing.T) {
	for body, wantOK := range map[string]bool{
		"{\"templateID\":\"caf\xc3\xa9\"}": true,
		"{\"templateID\":\"caf\xe9\"}":     false,
	} {
		var v struct{ TemplateID string }
		w := httptest.NewRecorder()
		_, ok := readJSON(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &v)
		if ok != wantOK {
			t.Errorf("%q: ok %v, want %v (%d %s)", body, ok, wantOK, w.Code, w.Body)
		}
		if !wantOK && (w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "UTF-8")) {
			t.Errorf("%q: %d %s, want 400 naming UTF-8", body, w.Code, w.Body)
		}
	}
}
