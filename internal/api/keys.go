package api

import (
	"errors"
	"net/http"
	"sort"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

func keyView(k auth.Key) apiv1.APIKey {
	return apiv1.APIKey{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Admin: k.Admin, Project: project.Of(k.Project), CreatedAt: k.CreatedAt}
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateKeyRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.Name == "" || len(req.Name) > 128 {
		writeError(w, http.StatusBadRequest, "name is required (at most 128 characters)")
		return
	}
	if req.Project != "" {
		if err := project.ValidName(req.Project); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	k, secret, err := s.cfg.Keys.Create(req.Name, req.Project, req.Admin)
	if err != nil {
		s.fail(w, err)
		return
	}
	v := keyView(k)
	v.Key = secret
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	scope, ok := listScope(w, r)
	if !ok {
		return
	}
	keys := s.cfg.Keys.List()
	sort.Slice(keys, func(i, j int) bool { return keys[i].CreatedAt.Before(keys[j].CreatedAt) })
	out := apiv1.KeyList{Keys: []apiv1.APIKey{}}
	for _, k := range keys {
		if scope.Sees(k.Project) {
			out.Keys = append(out.Keys, keyView(k))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	err := s.cfg.Keys.Revoke(r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "API key "+r.PathValue("id")+" not found")
		return
	}
	if errors.Is(err, auth.ErrLastAdmin) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
