package e2b

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/space-platform/space/internal/controlplane"
)

func TestUnavailableNodeIs503(t *testing.T) {
	err := fmt.Errorf("connect: %w", &controlplane.NodeUnavailableError{Sandbox: "sb1", Node: "n2", State: "unreachable"})
	if got := errorStatus(err); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d; want 503", got)
	}
}
