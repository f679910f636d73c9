package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/inflight"
	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/pkg/apiv1"
)

// A key at its bound of requests, or of uploads, in flight gets 429 with
// a JSON error; another key does not pay for it.
func TestKeyBoundsInFlight(t *testing.T) {
	keys, _ := openKeys(t)
	busy, busySecret, err := keys.Create("busy", "team", false)
	if err != nil {
		t.Fatal(err)
	}
	_, otherSecret, err := keys.Create("other", "team", false)
	if err != nil {
		t.Fatal(err)
	}
	requests, uploads := inflight.New(2, "requests"), inflight.New(1, "uploads")
	srv := httptest.NewServer(New(Config{Keys: keys, Metrics: metrics.NewRegistry(), Requests: requests, Uploads: uploads}))
	t.Cleanup(srv.Close)
	call := func(secret, method, path, contentType string) (int, apiv1.Error) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apiv1.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}

	// A template archive upload (multipart, here malformed: 400 once
	// admitted) while the key holds its one upload.
	uploads.Enter(busy.ID)
	if code, e := call(busySecret, "POST", "/v1/templates", "multipart/form-data"); code != http.StatusTooManyRequests || !strings.Contains(e.Message, "1 uploads in flight") {
		t.Errorf("upload past the bound: %d %+v, want 429", code, e)
	}
	if code, _ := call(otherSecret, "POST", "/v1/templates", "multipart/form-data"); code != http.StatusBadRequest {
		t.Errorf("another key's upload: %d, want it admitted (400 for the malformed body)", code)
	}
	uploads.Leave(busy.ID)
	if code, _ := call(busySecret, "POST", "/v1/templates", "multipart/form-data"); code != http.StatusBadRequest {
		t.Errorf("upload after the other ended: %d, want it admitted", code)
	}
	if n := uploads.InFlight(busy.ID); n != 0 {
		t.Errorf("%d uploads left counted", n)
	}

	requests.Enter(busy.ID)
	requests.Enter(busy.ID)
	if code, e := call(busySecret, "GET", "/v1/templates", ""); code != http.StatusTooManyRequests || !strings.Contains(e.Message, "2 requests in flight") {
		t.Errorf("request past the bound: %d %+v, want 429", code, e)
	}
}
