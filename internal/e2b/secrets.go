package e2b

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
)

// Secrets is space's secret store as E2B's /secrets uses it;
// *secrets.Store satisfies it. Values go in, never out.
type Secrets interface {
	Put(ref string, value []byte, metadata map[string]string) (secrets.Info, bool, error)
	List() ([]secrets.Info, error)
	Exists(ref string) bool
	Delete(ref string) error
}

var _ Secrets = (*secrets.Store)(nil)

// secretJSON is E2B's Secret: metadata only, never the value.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int               `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

// secretIDPrefix starts E2B's secret identifiers; names cannot start with
// it, so a path parameter is unambiguous.
const secretIDPrefix = "sec_"

// secretID is a secret's identifier: derived from its project, name and
// creation time, so it is stable while the secret lives and a secret
// deleted and created again gets a new one.
func secretID(i secrets.Info) string {
	sum := sha256.Sum256([]byte(project.Of(i.Project) + "/" + i.Name + "\x00" + i.CreatedAt.UTC().Format(time.RFC3339Nano)))
	return secretIDPrefix + hex.EncodeToString(sum[:12])
}

func secretView(i secrets.Info) secretJSON {
	m := i.Metadata
	if m == nil {
		m = map[string]string{}
	}
	return secretJSON{
		SecretID: secretID(i), Name: i.Name, CurrentVersion: i.Version, Metadata: m,
		CreatedAt: i.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: i.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
}

// secretBody is E2B's NewSecret and SecretUpdate.
type secretBody struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// secretStore is the store, or a 503 when the server has none.
func (h *Handler) secretStore(w http.ResponseWriter) (Secrets, bool) {
	if h.cfg.Secrets == nil {
		writeError(w, http.StatusServiceUnavailable, "this server keeps no secrets (no secret store is configured)")
		return nil, false
	}
	return h.cfg.Secrets, true
}

// secretWritesNeedAdmin: storing, replacing and deleting secrets take an
// admin key, as in space's own API (docs/security.md); any key of the
// project may read their metadata.
func secretWritesNeedAdmin(w http.ResponseWriter, r *http.Request) bool {
	if k, _ := r.Context().Value(keyContext{}).(auth.Key); k.Admin {
		return true
	}
	writeError(w, http.StatusForbidden, "storing, changing and deleting secrets need an admin key (space secrets set NAME, or E2B_API_KEY set to an admin key)")
	return false
}

// projectSecrets lists the secrets of the caller's project, by name.
func (h *Handler) projectSecrets(w http.ResponseWriter, r *http.Request) ([]secrets.Info, bool) {
	store, ok := h.secretStore(w)
	if !ok {
		return nil, false
	}
	all, err := store.List()
	if err != nil {
		h.log.Error("e2b: list secrets", "err", err)
		writeError(w, http.StatusInternalServerError, "listing secrets failed")
		return nil, false
	}
	owner := scopeOf(r).Owner()
	var out []secrets.Info
	for _, i := range all {
		if project.Of(i.Project) == owner {
			out = append(out, i)
		}
	}
	return out, true // List sorts by project and name
}

// findSecret resolves {secretID}, an identifier or a name, in the caller's
// project; it answers 404 itself.
func (h *Handler) findSecret(w http.ResponseWriter, r *http.Request) (secrets.Info, bool) {
	ref := r.PathValue("secretID")
	list, ok := h.projectSecrets(w, r)
	if !ok {
		return secrets.Info{}, false
	}
	// An exact name or identifier first, then the name as E2B stores it
	// (lower-cased), for secrets stored through space under another case.
	for _, i := range list {
		if i.Name == ref || secretID(i) == ref {
			return i, true
		}
	}
	for _, i := range list {
		if strings.EqualFold(i.Name, ref) {
			return i, true
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("secret %q not found", ref))
	return secrets.Info{}, false
}

// listSecrets is GET /secrets: the project's secrets by name, paged by
// limit (default and maximum 100) and nextToken.
func (h *Handler) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, ok := h.projectSecrets(w, r)
	if !ok {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be 1 to 100, got %q", v))
			return
		}
		limit = n
	}
	if tok := r.URL.Query().Get("nextToken"); tok != "" {
		after, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			writeError(w, http.StatusBadRequest, "nextToken is not a token this server gave out")
			return
		}
		i, _ := slices.BinarySearchFunc(list, string(after), func(s secrets.Info, name string) int { return strings.Compare(s.Name, name) })
		if i < len(list) && list[i].Name == string(after) {
			i++
		}
		list = list[i:]
	}
	if len(list) > limit {
		list = list[:limit]
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(list[limit-1].Name)))
	}
	out := make([]secretJSON, 0, len(list))
	for _, i := range list {
		out = append(out, secretView(i))
	}
	writeJSON(w, http.StatusOK, out)
}

// createSecret is POST /secrets: 201, or 409 if the name is taken.
func (h *Handler) createSecret(w http.ResponseWriter, r *http.Request) {
	if !secretWritesNeedAdmin(w, r) {
		return
	}
	store, ok := h.secretStore(w)
	if !ok {
		return
	}
	var body secretBody
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	// E2B stores names lower-cased.
	name := strings.ToLower(body.Name)
	switch {
	case name == "":
		writeError(w, http.StatusBadRequest, "name is required")
		return
	case strings.HasPrefix(name, secretIDPrefix):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("secret names must not start with %q, which marks secret identifiers", secretIDPrefix))
		return
	case body.Value == nil:
		writeError(w, http.StatusBadRequest, "value is required")
		return
	}
	if err := secrets.ValidName(name); err != nil {
		h.failSecret(w, err)
		return
	}
	ref := secrets.Ref(scopeOf(r).Owner(), name)
	if store.Exists(ref) {
		writeError(w, http.StatusConflict, fmt.Sprintf("secret %q already exists; update it with POST /secrets/%s", name, name))
		return
	}
	info, _, err := store.Put(ref, []byte(*body.Value), orEmpty(body.Metadata))
	if err != nil {
		h.failSecret(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, secretView(info))
}

// updateSecret is POST /secrets/{secretID}: a new value (a new version),
// and new metadata when given.
func (h *Handler) updateSecret(w http.ResponseWriter, r *http.Request) {
	if !secretWritesNeedAdmin(w, r) {
		return
	}
	var body secretBody
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	if body.Value == nil {
		writeError(w, http.StatusBadRequest, "value is required")
		return
	}
	cur, ok := h.findSecret(w, r)
	if !ok {
		return
	}
	info, _, err := h.cfg.Secrets.Put(secrets.Ref(cur.Project, cur.Name), []byte(*body.Value), body.Metadata)
	if err != nil {
		h.failSecret(w, err)
		return
	}
	writeJSON(w, http.StatusOK, secretView(info))
}

func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request) {
	if info, ok := h.findSecret(w, r); ok {
		writeJSON(w, http.StatusOK, secretView(info))
	}
}

// deleteSecret is DELETE /secrets/{secretID}: 204, or 409 while a live
// sandbox's rules use the secret (their next request would fail).
func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if !secretWritesNeedAdmin(w, r) {
		return
	}
	cur, ok := h.findSecret(w, r)
	if !ok {
		return
	}
	if users := h.cfg.ControlPlane.SecretUsers(cur.Project, cur.Name); len(users) > 0 {
		writeError(w, http.StatusConflict, fmt.Sprintf("secret %s is used by the network rules of sandboxes %s; kill them or update their network first", cur.Name, strings.Join(users[:min(len(users), 5)], ", ")))
		return
	}
	if err := h.cfg.Secrets.Delete(secrets.Ref(cur.Project, cur.Name)); err != nil {
		h.failSecret(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failSecret maps secret store errors; their messages name secrets, never
// values.
func (h *Handler) failSecret(w http.ResponseWriter, err error) {
	status := secrets.HTTPStatus(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		h.log.Error("e2b: secret store", "err", err)
		msg = "secret store failed"
	}
	writeError(w, status, msg)
}

// orEmpty makes absent metadata empty, so a new secret records none.
func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
