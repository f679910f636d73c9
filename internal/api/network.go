package api

import (
	"net/http"

	"github.com/space-platform/space/pkg/apiv1"
)

// setNetwork replaces a sandbox's egress policy (PUT /v1/sandboxes/{id}/network).
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req apiv1.NetworkPolicy
	if !s.readJSON(w, r, &req) {
		return
	}
	sb, err := s.cp.SetNetwork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}
