package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/pkg/apiv1"
)

// Secrets is the secret store as the API uses it. Values go in, never out.
type Secrets interface {
	Set(name string, value []byte) (secrets.Info, bool, error)
	List() ([]secrets.Info, error)
	Delete(name string) error
}

func secretView(i secrets.Info) apiv1.Secret {
	return apiv1.Secret{Name: i.Name, Project: project.Of(i.Project), CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

// secretProject is the project a secrets request addresses: the body's or
// ?project=, else the key's own.
func secretProject(w http.ResponseWriter, r *http.Request, p string) (string, bool) {
	if p == "" {
		p = r.URL.Query().Get("project")
	}
	if p == "" {
		return scopeOf(r).Owner(), true
	}
	if err := project.ValidName(p); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return p, true
}

// setSecret creates or replaces a secret (POST /v1/secrets): 201 when
// created, 200 when replaced.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SetSecretRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	p, ok := secretProject(w, r, req.Project)
	if !ok {
		return
	}
	if err := secrets.ValidName(req.Name); err != nil {
		s.failSecret(w, err)
		return
	}
	info, created, err := s.cfg.Secrets.Set(secrets.Ref(p, req.Name), []byte(req.Value))
	if err != nil {
		s.failSecret(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, secretView(info))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	scope, ok := listScope(w, r)
	if !ok {
		return
	}
	list, err := s.cfg.Secrets.List()
	if err != nil {
		s.failSecret(w, err)
		return
	}
	out := apiv1.SecretList{Secrets: []apiv1.Secret{}}
	for _, i := range list {
		if scope.Sees(i.Project) {
			out.Secrets = append(out.Secrets, secretView(i))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSecret removes a secret, unless a live sandbox's credential rules
// use it: they would fail on their next request (409 names them).
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, ok := secretProject(w, r, "")
	if !ok {
		return
	}
	if err := secrets.ValidName(name); err != nil {
		s.failSecret(w, fmt.Errorf("secret %q: %w", name, secrets.ErrNotFound))
		return
	}
	if users := s.cp.SecretUsers(p, name); len(users) > 0 {
		if len(users) > 5 {
			users = append(users[:5], fmt.Sprintf("and %d more", len(users)-5))
		}
		writeError(w, http.StatusConflict, fmt.Sprintf("secret %s is used by the credential rules of sandboxes %s; delete those first", name, strings.Join(users, ", ")))
		return
	}
	if err := s.cfg.Secrets.Delete(secrets.Ref(p, name)); err != nil {
		s.failSecret(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failSecret maps secret store errors; their messages name secrets, never
// values.
func (s *Server) failSecret(w http.ResponseWriter, err error) {
	status := secrets.HTTPStatus(err)
	if status != http.StatusInternalServerError {
		writeError(w, status, err.Error())
		return
	}
	s.log.Error("secret store", "err", err)
	writeError(w, status, "secret store: "+err.Error())
}

// credentialsNeedAdmin refuses credential rules from a non-admin key: a
// rule decides which host receives a secret, so whoever writes one can
// send any stored secret anywhere.
func credentialsNeedAdmin(w http.ResponseWriter, r *http.Request, req apiv1.CreateSandboxRequest) bool {
	if len(req.Credentials) == 0 {
		return true
	}
	if key, ok := r.Context().Value(keyContext{}).(auth.Key); ok && key.Admin {
		return true
	}
	writeError(w, http.StatusForbidden, "credential rules need an admin key")
	return false
}
