package e2b

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/inflight"
)

// noBuilds is a Templates whose every method would panic: the requests
// below must be refused before any reaches it.
type noBuilds struct{ Templates }

// The E2B API bounds a key's requests in flight (shared with the native
// API by the server), and the uploads of a signed link are charged to the
// project that asked for it.
func TestKeyBoundsInFlight(t *testing.T) {
	requests, uploads := inflight.New(1, "requests"), inflight.New(1, "uploads")
	h := New(Config{Keys: oneKey{}, Templates: noBuilds{}, Requests: requests, Uploads: uploads})

	requests.Enter("") // oneKey's key has the empty ID
	r := httptest.NewRequest(http.MethodGet, "/sandboxes", nil)
	r.Header.Set("X-API-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"code":429`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("request past the bound: %d %s", w.Code, w.Body)
	}

	uploads.Enter("project p")
	hash := strings.Repeat("a", 64)
	expires := time.Now().Add(time.Hour).Unix()
	link := fmt.Sprintf("/templates/t/files/%s?project=p&expires=%d&token=%s", hash, expires, h.uploadToken("p", hash, expires))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPut, link, strings.NewReader("archive")))
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "1 uploads in flight") {
		t.Errorf("upload past the project's bound: %d %s", w.Code, w.Body)
	}
}
