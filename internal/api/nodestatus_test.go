package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/pkg/apiv1"
)

// A sandbox whose node does not answer is 503 naming the node and its
// state; a cluster without room is 422 with the cluster's figures.
func TestNodeErrorsStatus(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		words  []string
	}{
		{&controlplane.NodeUnavailableError{Sandbox: "sb1", Node: "n2", State: "unreachable"}, http.StatusServiceUnavailable, []string{"n2", "unreachable"}},
		{fmt.Errorf("pause sb1: %w", &controlplane.NodeUnavailableError{Sandbox: "sb1", Node: "n3", State: "lost"}), http.StatusServiceUnavailable, []string{"n3", "lost"}},
		{fmt.Errorf("%w: %w", controlplane.ErrCapacity, &cluster.CapacityError{Nodes: 3, Holding: 2, FreeMemoryMB: 512, VCPUs: 4, FreeDiskMB: 100}),
			http.StatusUnprocessableEntity, []string{"3 nodes", "512 MiB"}},
	} {
		rec := httptest.NewRecorder()
		(&Server{}).fail(rec, c.err)
		var body apiv1.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %q: %v", c.err, rec.Body, err)
		}
		if rec.Code != c.status || body.Code != c.status {
			t.Fatalf("%v: status %d (code %d); want %d", c.err, rec.Code, body.Code, c.status)
		}
		for _, w := range c.words {
			if !strings.Contains(body.Message, w) {
				t.Fatalf("%v: message %q does not say %q", c.err, body.Message, w)
			}
		}
	}
}
