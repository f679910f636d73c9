package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
)

// A session past the count bound is a 429, one past the size bounds a
// 400, both as JSON errors, whether the node answered in process or
// across the wire (the same sentinels).
func TestSessionBoundErrors(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("node: %w: 64 running", nodeapi.ErrTooManySessions):                                      http.StatusTooManyRequests,
		nodeapi.SessionSpec{Cmd: []string{"x"}, Tag: string(make([]byte, nodeapi.MaxSessionTag+1))}.Check(): http.StatusBadRequest,
	} {
		rec := httptest.NewRecorder()
		(&Server{}).fail(rec, err)
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if jerr := json.Unmarshal(rec.Body.Bytes(), &body); jerr != nil || rec.Code != want || body.Code != want || body.Message == "" {
			t.Errorf("%v: %d %s, want %d", err, rec.Code, rec.Body, want)
		}
	}
}
