// Package api serves space's native HTTP API v1: JSON requests and
// responses, server-sent events for output streams, API-key authentication,
// and one error shape ({"code","message"}) for every failure.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/inflight"
	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/version"
	"github.com/space-platform/space/pkg/apiv1"
)

// Templates is the template catalog as the API uses it. Every call sees
// the catalog as the caller's scope does: built-in templates and the
// scope's project's; a template outside it is not found.
type Templates interface {
	Submit(scope project.Scope, name string, recipeYAML []byte, build TemplateBuild) (apiv1.Template, error)
	Get(scope project.Scope, name string) (apiv1.Template, error)
	List(scope project.Scope) []apiv1.Template
	Logs(scope project.Scope, name string, from int) (lines []string, done bool, err error)
	Delete(scope project.Scope, name string) error
	SetPool(scope project.Scope, name string, size int) (apiv1.Template, error)
	// DiskUsed is what a project's built templates hold, as its
	// max_template_disk_mb quota counts it.
	DiskUsed(project string) (int64, error)
}

// Config wires the API.
type Config struct {
	ControlPlane *controlplane.ControlPlane
	Templates    Templates
	Keys         *auth.Keys
	Secrets      Secrets
	// Quotas are the per-project quotas the projects routes show and set.
	Quotas *project.Quotas
	// Nodes is the registry of nodes the nodes routes show and change
	// (nil: they answer 501).
	Nodes   Nodes
	Metrics *metrics.Registry
	Logger  *slog.Logger
	// MaxJSONBody bounds JSON request bodies; MaxFileBody bounds uploads.
	MaxJSONBody int64
	MaxFileBody int64
	// MaxTemplateArchive bounds an OCI archive uploaded with a recipe
	// (DefaultMaxTemplateArchive when zero).
	MaxTemplateArchive int64
	// Requests bounds one key's requests in flight (streams included);
	// past it the API answers 429. The server shares it with the E2B API,
	// so a key's bound holds across both. nil: DefaultMaxRequestsPerKey.
	Requests *inflight.Limiter
	// Uploads bounds one key's uploads in flight (file writes, template
	// archives, volume files), each of which holds a stream and disk
	// until it ends; past it 429. Shared like Requests. nil:
	// DefaultMaxUploadsPerKey.
	Uploads *inflight.Limiter
}

// DefaultMaxRequestsPerKey is the per-key bound on requests in flight.
const DefaultMaxRequestsPerKey = 256

// DefaultMaxUploadsPerKey is the per-key bound on uploads in flight.
const DefaultMaxUploadsPerKey = 16

// Server is the HTTP handler of the API.
type Server struct {
	cfg      Config
	cp       *controlplane.ControlPlane
	log      *slog.Logger
	mux      *http.ServeMux
	sessions *metrics.Counter
}

// Routes lists every route the API serves as "METHOD /path"; the OpenAPI
// document is checked against it.
var Routes []string

// New builds the API handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxJSONBody == 0 {
		cfg.MaxJSONBody = 1 << 20
	}
	if cfg.MaxFileBody == 0 {
		cfg.MaxFileBody = 1 << 30
	}
	if cfg.MaxTemplateArchive <= 0 {
		cfg.MaxTemplateArchive = DefaultMaxTemplateArchive
	}
	if cfg.Requests == nil {
		cfg.Requests = inflight.New(DefaultMaxRequestsPerKey, "requests")
	}
	if cfg.Uploads == nil {
		cfg.Uploads = inflight.New(DefaultMaxUploadsPerKey, "uploads")
	}
	s := &Server{cfg: cfg, cp: cfg.ControlPlane, log: cfg.Logger, mux: http.NewServeMux()}
	s.sessions = cfg.Metrics.Counter("space_sessions_started_total", "Command sessions started.")
	s.routes()
	return s
}

func (s *Server) routes() {
	Routes = Routes[:0]
	open := func(pattern string, h http.HandlerFunc) {
		Routes = append(Routes, pattern)
		s.mux.HandleFunc(pattern, h)
	}
	// Every route a non-admin key may call is scoped by its pattern (see
	// scoped): the object its path names must be one of the key's project.
	authed := func(pattern string, h http.HandlerFunc) { open(pattern, s.requireKey(false, s.scoped(pattern, h))) }
	admin := func(pattern string, h http.HandlerFunc) { open(pattern, s.requireKey(true, h)) }

	open("GET /healthz", s.healthz)
	open("GET /metrics", s.metrics)

	authed("POST /v1/sandboxes", s.createSandbox)
	authed("GET /v1/sandboxes", s.listSandboxes)
	authed("GET /v1/sandboxes/{id}", s.getSandbox)
	authed("GET /v1/sandboxes/{id}/wait", s.waitSandbox)
	authed("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	authed("POST /v1/sandboxes/{id}/timeout", s.setTimeout)
	authed("PUT /v1/sandboxes/{id}/network", s.setNetwork)
	authed("GET /v1/sandboxes/{id}/events", s.sandboxEvents)
	authed("GET /v1/sandboxes/{id}/metrics", s.sandboxMetrics)
	authed("POST /v1/sandboxes/{id}/pause", s.lifecycleAction(pauseAction))
	authed("POST /v1/sandboxes/{id}/resume", s.lifecycleAction(resumeAction))
	authed("POST /v1/sandboxes/{id}/suspend", s.suspendSandbox)
	authed("POST /v1/sandboxes/{id}/snapshots", s.createSnapshot)
	authed("GET /v1/sandboxes/{id}/snapshots", s.listSnapshots)
	authed("DELETE /v1/sandboxes/{id}/snapshots/{name}", s.deleteSnapshot)
	authed("POST /v1/sandboxes/{id}/restore", s.restore)
	authed("POST /v1/sandboxes/{id}/branch", s.branch)

	authed("POST /v1/sandboxes/{id}/sessions", s.createSession)
	authed("GET /v1/sandboxes/{id}/sessions", s.listSessions)
	authed("GET /v1/sandboxes/{id}/sessions/{sid}", s.getSession)
	authed("GET /v1/sandboxes/{id}/sessions/{sid}/attach", s.attachSession)
	authed("POST /v1/sandboxes/{id}/sessions/{sid}/stdin", s.sessionStdin)
	authed("POST /v1/sandboxes/{id}/sessions/{sid}/signal", s.sessionSignal)
	authed("POST /v1/sandboxes/{id}/sessions/{sid}/resize", s.sessionResize)
	authed("POST /v1/sandboxes/{id}/exec", s.exec)

	authed("GET /v1/sandboxes/{id}/files", s.readFiles)
	authed("PUT /v1/sandboxes/{id}/files", s.writeFile)
	authed("DELETE /v1/sandboxes/{id}/files", s.removeFile)
	authed("POST /v1/sandboxes/{id}/files/mkdir", s.mkdir)
	authed("POST /v1/sandboxes/{id}/files/move", s.move)

	authed("POST /v1/templates", s.createTemplate)
	authed("GET /v1/templates", s.listTemplates)
	authed("GET /v1/templates/{name}", s.getTemplate)
	authed("GET /v1/templates/{name}/logs", s.templateLogs)
	authed("DELETE /v1/templates/{name}", s.deleteTemplate)
	authed("PUT /v1/templates/{name}/pool", s.setPool)

	authed("POST /v1/volumes", s.createVolume)
	authed("GET /v1/volumes", s.listVolumes)
	authed("GET /v1/volumes/{id}", s.getVolume)
	authed("DELETE /v1/volumes/{id}", s.deleteVolume)
	authed("GET /v1/volumes/{id}/files", s.readVolumeFiles)
	authed("PUT /v1/volumes/{id}/files", s.writeVolumeFile)
	authed("DELETE /v1/volumes/{id}/files", s.removeVolumeFile)
	authed("POST /v1/volumes/{id}/files/mkdir", s.mkdirVolume)

	admin("POST /v1/keys", s.createKey)
	admin("GET /v1/keys", s.listKeys)
	admin("DELETE /v1/keys/{id}", s.revokeKey)

	admin("POST /v1/secrets", s.setSecret)
	admin("GET /v1/secrets", s.listSecrets)
	admin("DELETE /v1/secrets/{name}", s.deleteSecret)

	admin("GET /v1/projects", s.listProjects)
	admin("GET /v1/projects/{name}", s.getProject)
	admin("PUT /v1/projects/{name}", s.setProject)

	admin("GET /v1/nodes", s.listNodes)
	admin("GET /v1/nodes/{id}", s.nodeAction(http.StatusOK, Nodes.Get))
	admin("POST /v1/nodes/{id}/cordon", s.nodeAction(http.StatusOK, Nodes.Cordon))
	admin("POST /v1/nodes/{id}/uncordon", s.nodeAction(http.StatusOK, Nodes.Uncordon))
	admin("POST /v1/nodes/{id}/drain", s.nodeAction(http.StatusAccepted, Nodes.Drain))
	admin("DELETE /v1/nodes/{id}", s.withNode(s.removeNode))
}

// ServeHTTP serves the API; unknown routes get a JSON 404 (or 405).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		// The mux's own 404/405 answers are plain text; give them our shape.
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		// The mux may also answer with a redirect to a cleaned path
		// ("//" in an id position); an API has no such routes.
		status := http.StatusNotFound
		if rec.status == http.StatusMethodNotAllowed {
			status = rec.status
		}
		msg := "no route for " + r.Method + " " + r.URL.Path
		if status == http.StatusMethodNotAllowed {
			msg = fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path)
		}
		writeError(w, status, msg)
		return
	}
	s.mux.ServeHTTP(w, r) // sets the path values that Handler does not
}

type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

type keyContext struct{}

// keyOf returns the key of an authenticated request.
func keyOf(r *http.Request) auth.Key {
	k, _ := r.Context().Value(keyContext{}).(auth.Key)
	return k
}

// scopeOf is what the request's key sees: its project, or every project
// for an admin key.
func scopeOf(r *http.Request) project.Scope { return keyOf(r).Scope() }

// listScope is the scope of a list request: an admin key may narrow it to
// one project with ?project=; any other key sees its own project only.
func listScope(w http.ResponseWriter, r *http.Request) (project.Scope, bool) {
	scope, p := scopeOf(r), r.URL.Query().Get("project")
	if p == "" {
		return scope, true
	}
	if err := project.ValidName(p); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return scope, false
	}
	if !scope.All && p != scope.Owner() {
		writeError(w, http.StatusForbidden, "a key of project "+scope.Owner()+" lists only its own project; ?project= of another needs an admin key")
		return scope, false
	}
	return project.In(p), true
}

// scoped confines a route to the caller's project before its handler runs,
// by the route's pattern: a sandbox route ({id}) answers 404 unless the
// sandbox (or, once it is gone, its snapshots) belongs to a project the key
// sees, and a template route ({name}) unless the scope sees the template.
// The 404 is the one a missing id gets, body and all, so an id of another
// project leaks nothing; no handler runs, so nothing changes. A route with
// a path parameter of any other kind is a programming error: it panics at
// start, so a new route cannot go out unscoped.
func (s *Server) scoped(pattern string, next http.HandlerFunc) http.HandlerFunc {
	_, path, _ := strings.Cut(pattern, " ")
	switch {
	case strings.HasPrefix(path, "/v1/sandboxes/{id}"):
		return func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			if owner, ok := s.cp.Owner(id); !ok || !scopeOf(r).Sees(owner) {
				s.fail(w, controlplane.NotFound(id))
				return
			}
			next(w, r)
		}
	case strings.HasPrefix(path, "/v1/templates/{name}"):
		return func(w http.ResponseWriter, r *http.Request) {
			if _, err := s.cfg.Templates.Get(scopeOf(r), r.PathValue("name")); err != nil {
				s.fail(w, err)
				return
			}
			next(w, r)
		}
	case strings.HasPrefix(path, "/v1/volumes/{id}"):
		return func(w http.ResponseWriter, r *http.Request) {
			if _, err := s.cp.ResolveVolume(scopeOf(r), r.PathValue("id")); err != nil {
				s.fail(w, err)
				return
			}
			next(w, r)
		}
	case strings.Contains(path, "{"):
		panic("api: route " + pattern + " has a path parameter but no project scoping")
	}
	return next
}

// requireKey checks the API key (Bearer or X-API-Key), bounds the key's
// requests in flight, and ends the request (streams included) when the key
// is revoked.
func (s *Server) requireKey(admin bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secret := r.Header.Get("X-API-Key")
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && secret == "" {
			secret = strings.TrimSpace(bearer)
		}
		if secret == "" {
			writeError(w, http.StatusUnauthorized, "missing API key: send Authorization: Bearer <key> or X-API-Key")
			return
		}
		key, err := s.cfg.Keys.Check(secret)
		if err != nil {
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		if admin && !key.Admin {
			writeError(w, http.StatusForbidden, "this operation needs an admin key")
			return
		}
		if !s.cfg.Requests.Admit(w, key.ID) {
			return
		}
		defer s.cfg.Requests.Leave(key.ID)
		revoked, unwatch := s.cfg.Keys.Watch(key.ID)
		defer unwatch()
		ctx, cancel := context.WithCancel(context.WithValue(r.Context(), keyContext{}, key))
		defer cancel()
		go func() {
			select {
			case <-revoked:
				cancel()
			case <-ctx.Done():
			}
		}()
		next(w, r.WithContext(ctx))
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": version.Version})
}

func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	s.cfg.Metrics.WriteText(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiv1.Error{Code: status, Message: msg})
}

// ReadJSONBody reads a JSON request body of at most limit bytes, or
// answers 413 past it, or 400 when the body cannot be read or is not
// valid UTF-8, and reports false. The E2B API reads its bodies with it
// too.
func ReadJSONBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return nil, false
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD and carry on, so
	// a name or tag would be stored as something other than what was sent.
	if !utf8.Valid(data) {
		writeError(w, http.StatusBadRequest, "malformed JSON body: it is not valid UTF-8")
		return nil, false
	}
	return data, true
}

// readJSON decodes a bounded JSON body into v, rejecting unknown fields and
// trailing data so that typos are reported rather than ignored.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	data, ok := ReadJSONBody(w, r, s.cfg.MaxJSONBody)
	if !ok {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			writeError(w, http.StatusBadRequest, "request body is empty; expected a JSON object")
		default:
			writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		}
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed JSON body: unexpected data after the JSON object")
		return false
	}
	return true
}

// fail maps an error from the layers below to a status and writes it.
func (s *Server) fail(w http.ResponseWriter, err error) {
	var stateErr *controlplane.StateError
	var fileErr *nodeapi.AgentError
	var tooBig *http.MaxBytesError
	var quotaErr *controlplane.QuotaError
	switch {
	case errors.Is(err, cluster.ErrUnknownNode):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, cluster.ErrConflict):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, cluster.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, cluster.ErrNoCapacity):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, controlplane.ErrNodeUnavailable):
		// The message names the node and its state; the sandbox is kept
		// and answers again once its node does.
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &quotaErr):
		if quotaErr.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(quotaErr.RetryAfter.Seconds())))
		}
		writeError(w, http.StatusTooManyRequests, quotaErr.Error())
	case errors.Is(err, ErrTemplateShared):
		writeError(w, http.StatusForbidden, err.Error())
	case errors.As(err, &stateErr):
		writeError(w, http.StatusConflict, stateErr.Error())
	case errors.As(err, &fileErr):
		writeError(w, fileErr.Status, fileErr.Message)
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
	case errors.Is(err, controlplane.ErrNotFound), errors.Is(err, controlplane.ErrUnknownTemplate),
		errors.Is(err, nodeapi.ErrNoSession), errors.Is(err, ErrTemplateNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, controlplane.ErrInvalid), errors.Is(err, ErrBadRecipe):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, controlplane.ErrCapacity):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, controlplane.ErrTemplateNotReady), errors.Is(err, ErrTemplateInUse), errors.Is(err, ErrTemplateBuiltin):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, nodeapi.ErrNoRuntime), errors.Is(err, nodeapi.ErrNoCheckpoint):
		// A backend the node or the template does not have, or one that
		// cannot save this sandbox's memory.
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, nodeapi.ErrNoSandbox):
		// The sandbox stopped between finding it running and the call
		// reaching its node.
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, nodeapi.ErrTooManySessions):
		writeError(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, nodeapi.ErrSessionSpec):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, nodeapi.ErrExecTimeout):
		writeError(w, http.StatusGatewayTimeout, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, err.Error())
	default:
		s.log.Error("request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// Errors a Templates implementation returns (wrapped).
var (
	ErrTemplateNotFound = errors.New("template not found")
	ErrTemplateInUse    = errors.New("template is in use")
	ErrTemplateShared   = errors.New("template is shared")
	ErrBadRecipe        = errors.New("invalid recipe")
	// ErrTemplateBuiltin refuses deleting a built-in template: the nodes
	// build those at their start, so a delete would not last.
	ErrTemplateBuiltin = errors.New("template is built in")
)
