package e2b

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/controlplane"
)

func TestUnavailableNodeIs503(t *testing.T) {
	err := fmt.Errorf("connect: %w", &controlplane.NodeUnavailableError{Sandbox: "sb1", Node: "n2", State: "unreachable"})
	if got := errorStatus(err); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d; want 503", got)
	}
}

// A template build past its project's quota is 429, as a create is, with
// the quota in the message.
func TestTemplateBuildPastQuotaIs429(t *testing.T) {
	h := &Handler{}
	rec := httptest.NewRecorder()
	h.templateFail(rec, fmt.Errorf("build a template: %w", &controlplane.QuotaError{Project: "p", Message: "the project has 1 of its 1 sandboxes"}))
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "1 of its 1 sandboxes") {
		t.Fatalf("status %d, body %s; want 429 naming the quota", rec.Code, rec.Body)
	}
}
