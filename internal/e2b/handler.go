// Package e2b serves E2B's control-plane REST API (the surface the E2B SDKs
// call at E2B_API_URL) on top of space's control plane, so that unmodified
// E2B SDKs create, list, pause, resume, fork, snapshot and kill space
// sandboxes. Sandbox traffic (envd, exposed ports) does not pass through
// here; it goes through the host proxy (package proxy).
//
// The wire contract is /work/shared/docs/e2b-protocol.md §2: exact status
// codes (the Python SDK parses only the documented ones), a non-empty JSON
// `{"code","message"}` body on every error (the JS SDK treats an empty error
// body as success), and the required fields of every schema.
package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/envdversion"
	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/inflight"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// ControlPlane is what the E2B API needs of space's control plane;
// *controlplane.ControlPlane satisfies it.
//
// Calls that look a sandbox or snapshot up take the caller's scope; the
// others act on a sandbox the scoped route check let through.
type ControlPlane interface {
	Create(scope project.Scope, req apiv1.CreateSandboxRequest) (controlplane.Sandbox, error)
	Wait(ctx context.Context, id, state string) (controlplane.Sandbox, error)
	Get(scope project.Scope, id string) (controlplane.Sandbox, error)
	List(scope project.Scope, f controlplane.Filter) []controlplane.Sandbox
	Delete(ctx context.Context, id string) error
	SetTimeout(id string, timeoutS int) (controlplane.Sandbox, error)
	Suspend(ctx context.Context, id string) (controlplane.Sandbox, error)
	SuspendWith(ctx context.Context, id string, opts controlplane.SuspendOptions) (controlplane.Sandbox, error)
	Resume(ctx context.Context, id string) (controlplane.Sandbox, error)
	// ResumeFromDisk resumes by booting the disk afresh, memory image or
	// not (connect's memory: false).
	ResumeFromDisk(ctx context.Context, id string) (controlplane.Sandbox, error)
	Branch(ctx context.Context, id string, count, timeoutS int) ([]controlplane.Sandbox, error)
	CreateSnapshot(ctx context.Context, id, name string) (controlplane.Snapshot, error)
	Snapshots(sandboxID string) ([]controlplane.Snapshot, error)
	ResolveSnapshot(scope project.Scope, ref string) (controlplane.Snapshot, error)
	DeleteSnapshot(sandboxID, name string) error
	Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.MetricSample, error)
	ResolveTemplate(scope project.Scope, nameOrID string) (nodeapi.TemplateSpec, error)
	SetEgress(ctx context.Context, id string, req apiv1.NetworkPolicy, headerRules []apiv1.CredentialRule) (controlplane.Sandbox, error)
	SecretUsers(p, name string) []string
	VolumeControl
}

// Keys checks API keys; *auth.Keys satisfies it.
type Keys interface {
	Check(secret string) (auth.Key, error)
}

// Config wires the E2B API.
type Config struct {
	ControlPlane ControlPlane
	Keys         Keys
	// Secrets is space's secret store, served as E2B's /secrets; nil
	// answers 503 there.
	Secrets Secrets
	// Domain is returned as the sandboxes' `domain`; empty means null, so
	// SDKs fall back to their own configuration (E2B_SANDBOX_URL or
	// E2B_DOMAIN). It must never be an E2B domain.
	Domain string
	// Aliases answers template alias lookups; nil finds none.
	Aliases TemplateLookup
	// StartTimeout bounds how long create, connect and fork wait for a
	// sandbox to run before answering.
	StartTimeout time.Duration
	// Templates builds templates from E2B's build API (templates.go); nil
	// answers its routes 501.
	Templates Templates
	// MaxTemplateFiles bounds one uploaded file archive of a template
	// build (DefaultMaxTemplateFiles when zero).
	MaxTemplateFiles int64
	Logger           *slog.Logger
	// Requests and Uploads bound each key's requests and uploads in
	// flight (429 past them); the server passes the native API's, so a
	// key's bounds hold across both APIs. nil: api's default bounds.
	Requests, Uploads *inflight.Limiter
}

// Handler is the E2B control-plane API as an http.Handler.
type Handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// uploadKey signs the template file upload links.
	uploadKey []byte
}

// Constants E2B's API returns and the SDKs check.
const (
	// clientID is the constant E2B returns; the Python SDK requires it.
	clientID = "6532622b"
	// envdVersion is the envd feature level space's agent implements; see
	// package envdversion for what the SDKs unlock with it.
	envdVersion = envdversion.Version
	// maxJSONBody bounds request bodies; E2B requests are small.
	maxJSONBody = 1 << 20
)

// New builds the handler.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if cfg.Requests == nil {
		cfg.Requests = inflight.New(api.DefaultMaxRequestsPerKey, "requests")
	}
	if cfg.Uploads == nil {
		cfg.Uploads = inflight.New(api.DefaultMaxUploadsPerKey, "uploads")
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), uploadKey: newUploadKey()}
	h.routes()
	return h
}

// Routes lists every route of the E2B API as "METHOD /path"; the
// cross-project test walks it.
var Routes []string

func (h *Handler) routes() {
	Routes = Routes[:0]
	open := func(pattern string, hf http.HandlerFunc) {
		Routes = append(Routes, pattern)
		h.mux.HandleFunc(pattern, hf)
	}
	// Every keyed route is scoped by its pattern (see scoped).
	authed := func(pattern string, hf http.HandlerFunc) { open(pattern, h.authed(h.scoped(pattern, hf))) }
	authed("POST /sandboxes", h.createV1)
	authed("POST /v2/sandboxes", h.createV2)
	authed("GET /sandboxes", h.listV1)
	authed("GET /v2/sandboxes", h.listV2)
	authed("GET /sandboxes/{id}", h.get)
	authed("DELETE /sandboxes/{id}", h.kill)
	authed("POST /sandboxes/{id}/timeout", h.setTimeout)
	authed("POST /sandboxes/{id}/pause", h.pause)
	authed("POST /sandboxes/{id}/resume", h.resumeDeprecated)
	authed("POST /sandboxes/{id}/connect", h.connectV1)
	authed("POST /v2/sandboxes/{id}/connect", h.connectV2)
	authed("POST /sandboxes/{id}/fork", h.fork)
	authed("GET /sandboxes/metrics", h.metricsOfMany)
	authed("GET /sandboxes/{id}/metrics", h.metrics)
	authed("POST /sandboxes/{id}/snapshots", h.createSnapshot)
	authed("GET /snapshots", h.listSnapshots)
	authed("DELETE /templates/{id}", h.deleteTemplate)
	authed("PUT /sandboxes/{id}/network", h.updateNetwork)
	authed("GET /secrets", h.listSecrets)
	authed("POST /secrets", h.createSecret)
	authed("GET /secrets/{secretID}", h.getSecret)
	authed("POST /secrets/{secretID}", h.updateSecret)
	authed("DELETE /secrets/{secretID}", h.deleteSecret)
	authed("POST /volumes", h.createVolume)
	authed("GET /volumes", h.listVolumes)
	authed("GET /volumes/{volumeID}", h.getVolume)
	authed("DELETE /volumes/{volumeID}", h.deleteVolume)
	// The content routes take the volume's token as well as an API key
	// and check the volume themselves (volumeContent).
	open("GET /volumecontent/{volumeID}/dir", h.volumeContent(h.listVolumeDir))
	open("POST /volumecontent/{volumeID}/dir", h.volumeContent(h.makeVolumeDir))
	open("GET /volumecontent/{volumeID}/path", h.volumeContent(h.statVolumePath))
	open("PATCH /volumecontent/{volumeID}/path", h.volumeContent(h.updateVolumePath))
	open("DELETE /volumecontent/{volumeID}/path", h.volumeContent(h.removeVolumePath))
	open("GET /volumecontent/{volumeID}/file", h.volumeContent(h.readVolumeFile))
	open("PUT /volumecontent/{volumeID}/file", h.volumeContent(h.writeVolumeFile))
	h.templateRoutes(open, authed)
	authed("GET /templates/aliases/{alias}", h.templateAlias)
	open("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

type keyContext struct{}

// scopeOf is what the request's key sees.
func scopeOf(r *http.Request) project.Scope {
	k, _ := r.Context().Value(keyContext{}).(auth.Key)
	return k.Scope()
}

// scoped confines a route to the caller's project before its handler runs:
// a sandbox ({id} under /sandboxes) or snapshot (/templates/{id}) of a
// project the key does not see answers the 404 of a missing one, and the
// handler never runs. A path parameter of another kind panics at start, so
// a new route cannot go out unscoped.
func (h *Handler) scoped(pattern string, next http.HandlerFunc) http.HandlerFunc {
	_, path, _ := strings.Cut(pattern, " ")
	switch {
	case strings.HasPrefix(path, "/sandboxes/{id}"), strings.HasPrefix(path, "/v2/sandboxes/{id}"):
		return func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			if _, err := h.cfg.ControlPlane.Get(scopeOf(r), id); err != nil {
				h.fail(w, sandboxNotFound(id))
				return
			}
			next(w, r)
		}
	case path == "/templates/{id}":
		return h.scopedSnapshotOrTemplate(next)
	case strings.HasPrefix(path, "/templates/{templateID}"), strings.HasPrefix(path, "/v2/templates/{templateID}"):
		return h.scopedTemplate(next)
	case path == "/secrets/{secretID}", path == "/templates/aliases/{alias}":
		// A secret is looked up in the caller's project only (findSecret),
		// a template alias in the key's scope (templateAlias): another
		// project's is not found.
		return next
	case path == "/volumes/{volumeID}":
		return func(w http.ResponseWriter, r *http.Request) {
			if _, err := h.cfg.ControlPlane.ResolveVolume(scopeOf(r), r.PathValue("volumeID")); err != nil {
				h.fail(w, err)
				return
			}
			next(w, r)
		}
	case strings.Contains(path, "{"):
		panic("e2b: route " + pattern + " has a path parameter but no project scoping")
	}
	return next
}

func sandboxNotFound(id string) error {
	return fmt.Errorf("sandbox %q not found: %w", id, controlplane.ErrNotFound)
}

func snapshotNotFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("snapshot %q not found (space deletes only snapshots through the E2B API; manage templates with `space template`)", id))
}

// ServeHTTP answers every request; unknown routes get a JSON 404 and known
// routes with another method a JSON 405, never an empty or plain-text body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		rec := &statusRecorder{header: http.Header{}}
		h.mux.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no E2B API route %s %s (space implements the sandbox, snapshot and metrics endpoints)", r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// statusRecorder captures what the mux would answer for an unmatched route.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// authed checks the API key: X-API-Key as the SDKs send it, or
// `Authorization: Bearer` (space's own clients). JS 2.20 may send both, the
// bearer then being an E2B access token; the API key wins.
func (h *Handler) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				key = strings.TrimSpace(bearer)
			}
		}
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing API key: set E2B_API_KEY to a space API key (X-API-Key header)")
			return
		}
		k, err := h.cfg.Keys.Check(key)
		if err != nil {
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		if !h.cfg.Requests.Admit(w, k.ID) {
			return
		}
		defer h.cfg.Requests.Leave(k.ID)
		next(w, r.WithContext(context.WithValue(r.Context(), keyContext{}, k)))
	}
}

// apiError is E2B's Error schema.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// errorStatus maps an error from the control plane to E2B's status codes.
func errorStatus(err error) int {
	var stateErr *controlplane.StateError
	var quotaErr *controlplane.QuotaError
	switch {
	case errors.As(err, &quotaErr):
		return http.StatusTooManyRequests
	case errors.Is(err, controlplane.ErrNodeUnavailable):
		// The sandbox's node does not answer; the sandbox is kept.
		return http.StatusServiceUnavailable
	case errors.Is(err, controlplane.ErrNotFound), errors.Is(err, controlplane.ErrUnknownTemplate):
		return http.StatusNotFound
	case errors.As(err, &stateErr), errors.Is(err, controlplane.ErrTemplateNotReady):
		return http.StatusConflict
	case errors.Is(err, controlplane.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, controlplane.ErrCapacity):
		// E2B reports a full quota as 429, which the SDKs raise as
		// RateLimitError; the message names the node's figures.
		return http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	status := errorStatus(err)
	var quotaErr *controlplane.QuotaError
	if errors.As(err, &quotaErr) && quotaErr.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(quotaErr.RetryAfter.Seconds())))
	}
	if status == http.StatusInternalServerError {
		h.log.Error("e2b request failed", "err", err)
	}
	writeError(w, status, err.Error())
}

// readJSON decodes an optional JSON body into v. Unknown fields are
// ignored: newer SDKs add optional fields, and the options space cannot
// honour are checked explicitly by the handlers. An absent body leaves v
// as it is; whether that is allowed is the caller's business (required
// reports it).
func readJSON(w http.ResponseWriter, r *http.Request, v any) (present, ok bool) {
	data, ok := api.ReadJSONBody(w, r, maxJSONBody)
	if !ok {
		return false, false
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return false, true
	}
	if err := json.Unmarshal(data, v); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return true, false
	}
	return true, true
}

// The control plane and the key registry are what the server wires in.
var (
	_ ControlPlane = (*controlplane.ControlPlane)(nil)
	_ Keys         = (*auth.Keys)(nil)
)
