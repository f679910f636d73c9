package api

import (
	"net/http"
	"testing"
)

// A route with a path parameter that scoped does not know would go out
// without a project check: registering one must fail loudly.
func TestScopedRefusesUnknownPathParameters(t *testing.T) {
	s := &Server{}
	noop := func(http.ResponseWriter, *http.Request) {}
	for _, pattern := range []string{"GET /v1/sandboxes", "POST /v1/templates", "GET /healthz"} {
		s.scoped(pattern, noop) // no parameter: nothing to scope
	}
	for _, pattern := range []string{"GET /v1/sandboxes/{id}/files", "DELETE /v1/templates/{name}", "PUT /v1/volumes/{id}/files"} {
		if s.scoped(pattern, noop) == nil {
			t.Fatalf("%s: nil handler", pattern)
		}
	}
	for _, pattern := range []string{"GET /v1/widgets/{id}", "POST /v1/things/{name}/do"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s has a path parameter of no known kind and was accepted unscoped", pattern)
				}
			}()
			s.scoped(pattern, noop)
		}()
	}
}
