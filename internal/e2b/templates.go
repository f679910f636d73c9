package e2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
)

// E2B's template build API (the routes the SDKs' Template() builder,
// Template.build and Template.buildInBackground call), translated into
// space recipes that space's builder builds. A template's E2B templateID
// is its name in the caller's project; a build is a record of that name,
// its tags and, once triggered, the space template (content-hash ID) it
// built.

// Templates is what the template build API needs of space's catalog; the
// server implements it for `space serve` and for a cluster's control
// plane (Config.Templates nil answers 501).
type Templates interface {
	// NewBuild records a build of name (a valid template name) in the
	// scope's project, to be tagged with tags once triggered.
	NewBuild(scope project.Scope, name string, tags []string) (TemplateBuild, error)
	// Build returns a build of the scope's project; ErrNotFound else.
	Build(scope project.Scope, buildID string) (TemplateBuild, error)
	// StartBuild submits the recipe of a waiting build, with the file
	// archives its copy steps name (by hash, staged by StageFiles) and
	// the registry credentials of its image; a build already started
	// is refused.
	// steps are E2B's step numbers of the recipe's ordered steps.
	StartBuild(scope project.Scope, buildID string, r *template.Recipe, registry *template.RegistryAuth, steps []int) (TemplateBuild, error)
	// Status is the state (building, ready, failed) and failure reason of
	// a started build's template, and its log lines from index from on.
	Status(scope project.Scope, b TemplateBuild, from int) (state, reason string, lines []string, err error)
	// Owns reports whether name is a template of the scope's project
	// (built or with a build recorded).
	Owns(scope project.Scope, name string) bool
	// HasFiles reports whether the scope's project holds the file
	// archive hash; StageFiles stores one, at most limit bytes
	// (template.ErrArchiveTooLarge beyond).
	HasFiles(scope project.Scope, hash string) bool
	StageFiles(scope project.Scope, hash string, r io.Reader, limit int64) error
	// Tags are the tags of name; AssignTags points tags of name at the
	// build target ("name:tag" or "name") points at and returns its
	// build; RemoveTags drops tags of name.
	Tags(scope project.Scope, name string) ([]TemplateTag, error)
	AssignTags(scope project.Scope, target string, tags []string) (buildID string, err error)
	RemoveTags(scope project.Scope, name string, tags []string) error
	// Delete deletes the scope's template name (built from code or
	// natively) with its tags and builds: ErrTemplateNotFound for a name
	// not the project's own, ErrTemplateInUse while sandboxes or pools
	// use it.
	Delete(scope project.Scope, name string) error
}

// TemplateBuild is one E2B build of a template.
type TemplateBuild struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Project owns it.
	Project string   `json:"project"`
	Tags    []string `json:"tags"`
	// TemplateID is the space template it built; empty while waiting.
	TemplateID string    `json:"template_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	// Steps maps the recipe's ordered steps to E2B's step numbers (1 for
	// the first instruction), so a failure names the SDK's step.
	Steps []int `json:"steps,omitempty"`
}

// TemplateTag is one tag of a template.
type TemplateTag struct {
	Tag       string
	BuildID   string
	CreatedAt time.Time
}

// ErrTemplateNotFound is wrapped by Templates for what the scope does
// not see; ErrBadTemplate for requests that cannot be built (400).
var (
	ErrTemplateNotFound = errors.New("template not found")
	ErrBadTemplate      = errors.New("invalid template build")
	ErrTemplateInUse    = errors.New("template in use")
)

// DefaultMaxTemplateFiles bounds one uploaded file archive
// (Config.MaxTemplateFiles when zero).
const DefaultMaxTemplateFiles = 1 << 30

// defaultTag is the tag of a build requested without one, as E2B names it.
const defaultTag = "default"

// uploadURLTTL is how long an upload link the files route hands out works.
const uploadURLTTL = time.Hour

var filesHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// E2B wire shapes of the build API.
type (
	templateBuildRequestV3 struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount *int     `json:"cpuCount"`
		MemoryMB *int     `json:"memoryMB"`
	}
	templateRequestResponseV3 struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Names      []string `json:"names"`
		Aliases    []string `json:"aliases"`
		Tags       []string `json:"tags"`
		Public     bool     `json:"public"`
	}
	templateBuildFileUpload struct {
		Present bool   `json:"present"`
		URL     string `json:"url,omitempty"`
	}
	fromImageRegistry struct {
		Type               string `json:"type"`
		Username           string `json:"username"`
		Password           string `json:"password"`
		ServiceAccountJSON string `json:"serviceAccountJson"`
	}
	templateStep struct {
		Type      string   `json:"type"`
		Args      []string `json:"args"`
		FilesHash string   `json:"filesHash"`
		Force     bool     `json:"force"`
	}
	templateBuildStartV2 struct {
		FromImage         string             `json:"fromImage"`
		FromTemplate      string             `json:"fromTemplate"`
		FromImageRegistry *fromImageRegistry `json:"fromImageRegistry"`
		StartCmd          string             `json:"startCmd"`
		ReadyCmd          string             `json:"readyCmd"`
		Steps             []templateStep     `json:"steps"`
		Force             bool               `json:"force"`
	}
	buildLogEntry struct {
		Timestamp time.Time `json:"timestamp"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
		Step      string    `json:"step,omitempty"`
	}
	buildStatusReason struct {
		Message    string          `json:"message"`
		Step       string          `json:"step,omitempty"`
		LogEntries []buildLogEntry `json:"logEntries"`
	}
	templateBuildInfo struct {
		TemplateID string             `json:"templateID"`
		BuildID    string             `json:"buildID"`
		Status     string             `json:"status"`
		LogEntries []buildLogEntry    `json:"logEntries"`
		Logs       []string           `json:"logs"`
		Reason     *buildStatusReason `json:"reason,omitempty"`
	}
	templateTagJSON struct {
		Tag       string    `json:"tag"`
		BuildID   string    `json:"buildID"`
		CreatedAt time.Time `json:"createdAt"`
	}
)

// templateRoutes adds the build API's routes.
func (h *Handler) templateRoutes(open, authed func(string, http.HandlerFunc)) {
	authed("POST /v3/templates", h.requestBuild)
	authed("GET /templates/{templateID}/files/{hash}", h.fileUploadLink)
	// The SDK uploads to the link without its API key: the link's
	// token, which names the project and the hash, authorizes it.
	open("PUT /templates/{templateID}/files/{hash}", h.uploadFiles)
	authed("POST /v2/templates/{templateID}/builds/{buildID}", h.triggerBuild)
	authed("GET /templates/{templateID}/builds/{buildID}/status", h.buildStatus)
	authed("GET /templates/{templateID}/builds/{buildID}/logs", h.buildLogs)
	// GET /templates/{templateID}/tags, written with a wildcard so that
	// GET /templates/aliases/{alias} (sem.go) is the more specific of
	// the two patterns instead of one that ServeMux refuses as ambiguous.
	authed("GET /templates/{templateID}/{sub}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("sub") != "tags" {
			writeError(w, http.StatusNotFound, "no such route: "+r.URL.Path)
			return
		}
		h.templateTags(w, r)
	})
	authed("POST /templates/tags", h.assignTags)
	authed("DELETE /templates/tags", h.removeTags)
}

// scopedTemplate confines a {templateID} route to the caller's templates.
func (h *Handler) scopedTemplate(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.Templates == nil {
			notBuilding(w)
			return
		}
		if name := r.PathValue("templateID"); !h.cfg.Templates.Owns(scopeOf(r), name) {
			templateNotFound(w, name)
			return
		}
		next(w, r)
	}
}

func notBuilding(w http.ResponseWriter) {
	writeError(w, http.StatusNotImplemented, "building templates through the E2B API is not supported on a cluster control plane; build them with `space template build` or the native API")
}

func templateNotFound(w http.ResponseWriter, name string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("template %q not found", name))
}

// templateFail answers an error of Templates.
func (h *Handler) templateFail(w http.ResponseWriter, err error) {
	var quotaErr *controlplane.QuotaError
	switch {
	case errors.As(err, &quotaErr):
		// A build past its project's quota or its bound of builds.
		h.fail(w, err)
	case errors.Is(err, ErrTemplateNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrBadTemplate):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrTemplateInUse):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, template.ErrArchiveTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	default:
		h.log.Error("e2b template request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// splitNameTag splits "name:tag".
func splitNameTag(s string) (name, tag string) {
	name, tag, _ = strings.Cut(s, ":")
	return name, tag
}

func validTags(tags []string) error {
	for _, t := range tags {
		if err := template.ValidName(t); err != nil {
			return fmt.Errorf("tag %q: use lowercase letters, digits, '.', '_' and '-'", t)
		}
	}
	return nil
}

func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Templates == nil {
		notBuilding(w)
		return
	}
	var req templateBuildRequestV3
	if _, ok := readJSON(w, r, &req); !ok {
		return
	}
	full := req.Name
	if full == "" {
		full = req.Alias
	}
	name, tag := splitNameTag(full)
	if name == "" {
		writeError(w, http.StatusBadRequest, "name: required (the template's name, optionally name:tag)")
		return
	}
	if err := template.ValidName(name); err != nil {
		writeError(w, http.StatusBadRequest, "name: "+err.Error())
		return
	}
	tags := append([]string(nil), req.Tags...)
	if tag != "" {
		tags = append(tags, tag)
	}
	if len(tags) == 0 {
		tags = []string{defaultTag}
	}
	if err := validTags(tags); err != nil {
		writeError(w, http.StatusBadRequest, "tags: "+err.Error())
		return
	}
	b, err := h.cfg.Templates.NewBuild(scopeOf(r), name, tags)
	if err != nil {
		h.templateFail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, templateRequestResponseV3{
		TemplateID: b.Name, BuildID: b.ID, Names: []string{b.Name}, Aliases: []string{b.Name}, Tags: b.Tags,
	})
}

// uploadToken authorizes the upload of hash into project until expires.
func (h *Handler) uploadToken(proj, hash string, expires int64) string {
	mac := hmac.New(sha256.New, h.uploadKey)
	fmt.Fprintf(mac, "%s\x00%s\x00%d", proj, hash, expires)
	return hex.EncodeToString(mac.Sum(nil))
}

func newUploadKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return k
}

func (h *Handler) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	if !filesHashPattern.MatchString(hash) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("files hash %q is not 64 hex digits", hash))
		return
	}
	scope := scopeOf(r)
	if h.cfg.Templates.HasFiles(scope, hash) {
		writeJSON(w, http.StatusCreated, templateBuildFileUpload{Present: true})
		return
	}
	proj := scope.Owner()
	expires := time.Now().Add(uploadURLTTL).Unix()
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	link := fmt.Sprintf("%s://%s/templates/%s/files/%s?project=%s&expires=%d&token=%s", scheme, r.Host,
		url.PathEscape(r.PathValue("templateID")), hash, url.QueryEscape(proj), expires, h.uploadToken(proj, hash, expires))
	writeJSON(w, http.StatusCreated, templateBuildFileUpload{Present: false, URL: link})
}

func (h *Handler) uploadFiles(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Templates == nil {
		notBuilding(w)
		return
	}
	hash, q := r.PathValue("hash"), r.URL.Query()
	proj, token := q.Get("project"), q.Get("token")
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || !filesHashPattern.MatchString(hash) || token == "" ||
		!hmac.Equal([]byte(token), []byte(h.uploadToken(proj, hash, expires))) {
		writeError(w, http.StatusForbidden, "invalid upload link: ask GET /templates/{templateID}/files/{hash} for one")
		return
	}
	if time.Now().Unix() > expires {
		writeError(w, http.StatusForbidden, "the upload link has expired: ask GET /templates/{templateID}/files/{hash} for a new one")
		return
	}
	limit := h.cfg.MaxTemplateFiles
	if limit <= 0 {
		limit = DefaultMaxTemplateFiles
	}
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the files are %d bytes; this server takes at most %d per copy", r.ContentLength, limit))
		return
	}
	// The signed link names no key: its uploads are charged to the
	// project that asked for it (a name no key ID can take).
	charged := "project " + proj
	if !h.cfg.Uploads.Admit(w, charged) {
		return
	}
	defer h.cfg.Uploads.Leave(charged)
	if err := h.cfg.Templates.StageFiles(project.In(proj), hash, r.Body, limit); err != nil {
		h.templateFail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// build looks the route's build up and checks it is of the route's template.
func (h *Handler) build(w http.ResponseWriter, r *http.Request) (TemplateBuild, bool) {
	b, err := h.cfg.Templates.Build(scopeOf(r), r.PathValue("buildID"))
	if err != nil || b.Name != r.PathValue("templateID") {
		writeError(w, http.StatusNotFound, fmt.Sprintf("build %q of template %q not found", r.PathValue("buildID"), r.PathValue("templateID")))
		return TemplateBuild{}, false
	}
	return b, true
}

func (h *Handler) triggerBuild(w http.ResponseWriter, r *http.Request) {
	b, ok := h.build(w, r)
	if !ok {
		return
	}
	var req templateBuildStartV2
	if present, ok := readJSON(w, r, &req); !ok {
		return
	} else if !present {
		writeError(w, http.StatusBadRequest, "a build needs a body: fromImage or fromTemplate, and steps")
		return
	}
	recipe, registry, steps, err := translateBuild(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := h.cfg.Templates.StartBuild(scopeOf(r), b.ID, recipe, registry, steps); err != nil {
		h.templateFail(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// stepOfReason finds the ordered step of a failure reason the builder
// wrote ("steps[N]: ..."); TemplateBuild.Steps maps it to E2B's number.
var stepOfReason = regexp.MustCompile(`(?:^|: )steps\[(\d+)\]`)

func (h *Handler) buildInfo(r *http.Request, b TemplateBuild, from int) (templateBuildInfo, error) {
	info := templateBuildInfo{TemplateID: b.Name, BuildID: b.ID, Status: "waiting", LogEntries: []buildLogEntry{}, Logs: []string{}}
	if b.TemplateID == "" {
		return info, nil
	}
	state, reason, lines, err := h.cfg.Templates.Status(scopeOf(r), b, from)
	if err != nil {
		return info, err
	}
	now := time.Now().UTC()
	for _, l := range lines {
		level := "info"
		if strings.HasPrefix(l, "build failed: ") {
			level = "error"
		}
		info.LogEntries = append(info.LogEntries, buildLogEntry{Timestamp: now, Level: level, Message: l})
	}
	switch state {
	case template.StateReady:
		info.Status = "ready"
	case template.StateFailed:
		info.Status = "error"
		info.Reason = &buildStatusReason{Message: reason, LogEntries: []buildLogEntry{}}
		if m := stepOfReason.FindStringSubmatch(reason); m != nil {
			if i, err := strconv.Atoi(m[1]); err == nil && i < len(b.Steps) {
				info.Reason.Step = strconv.Itoa(b.Steps[i])
			}
		}
	default:
		info.Status = "building"
	}
	return info, nil
}

// queryInt reads a non-negative integer query parameter (def when absent).
func queryInt(r *http.Request, key string, def int) (int, error) {
	s := r.URL.Query().Get(key)
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", key, s)
	}
	return v, nil
}

func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request) {
	b, ok := h.build(w, r)
	if !ok {
		return
	}
	from, err := queryInt(r, "logsOffset", 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := h.buildInfo(r, b, from)
	if err != nil {
		h.templateFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (h *Handler) buildLogs(w http.ResponseWriter, r *http.Request) {
	b, ok := h.build(w, r)
	if !ok {
		return
	}
	cursor, err := queryInt(r, "cursor", 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := queryInt(r, "limit", 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := h.buildInfo(r, b, cursor)
	if err != nil {
		h.templateFail(w, err)
		return
	}
	logs := info.LogEntries
	if len(logs) > limit {
		logs = logs[:limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": logs})
}

func (h *Handler) templateTags(w http.ResponseWriter, r *http.Request) {
	tags, err := h.cfg.Templates.Tags(scopeOf(r), r.PathValue("templateID"))
	if err != nil {
		h.templateFail(w, err)
		return
	}
	out := []templateTagJSON{}
	for _, t := range tags {
		out = append(out, templateTagJSON{Tag: t.Tag, BuildID: t.BuildID, CreatedAt: t.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Templates == nil {
		notBuilding(w)
		return
	}
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if _, ok := readJSON(w, r, &req); !ok {
		return
	}
	if req.Target == "" || len(req.Tags) == 0 {
		writeError(w, http.StatusBadRequest, "target (name:tag) and tags are required")
		return
	}
	if err := validTags(req.Tags); err != nil {
		writeError(w, http.StatusBadRequest, "tags: "+err.Error())
		return
	}
	buildID, err := h.cfg.Templates.AssignTags(scopeOf(r), req.Target, req.Tags)
	if err != nil {
		h.templateFail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": buildID, "tags": req.Tags})
}

func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Templates == nil {
		notBuilding(w)
		return
	}
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if _, ok := readJSON(w, r, &req); !ok {
		return
	}
	if req.Name == "" || len(req.Tags) == 0 {
		writeError(w, http.StatusBadRequest, "name and tags are required")
		return
	}
	if err := h.cfg.Templates.RemoveTags(scopeOf(r), req.Name, req.Tags); err != nil {
		h.templateFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bBaseImage is the image E2B's SDKs build from when a template names
// no base (and fromBaseImage()); space's own base template plays it.
const e2bBaseImage = "e2bdev/base"

// translateBuild turns E2B's build request into a recipe, the registry
// credentials of its image and, per ordered recipe step, E2B's step
// number. Steps keep E2B's order; ENV, WORKDIR and USER change what the
// steps after them see and, at the end, the template's defaults.
func translateBuild(req templateBuildStartV2) (*template.Recipe, *template.RegistryAuth, []int, error) {
	rec := &template.Recipe{Start: req.StartCmd, Ready: req.ReadyCmd}
	switch {
	case (req.FromImage == "") == (req.FromTemplate == ""):
		return nil, nil, nil, errors.New("exactly one of fromImage and fromTemplate must be given")
	case req.FromTemplate != "":
		rec.From = template.FromTemplate + ":" + req.FromTemplate
	case req.FromImage == e2bBaseImage || req.FromImage == e2bBaseImage+":latest":
		rec.From = template.FromTemplate + ":base"
	default:
		rec.From = template.FromImage + ":" + req.FromImage
	}
	var auth *template.RegistryAuth
	if reg := req.FromImageRegistry; reg != nil {
		if req.FromImage == "" {
			return nil, nil, nil, errors.New("fromImageRegistry: only for fromImage")
		}
		switch reg.Type {
		case "registry":
			if reg.Username == "" || reg.Password == "" {
				return nil, nil, nil, errors.New("fromImageRegistry: username and password are required")
			}
			auth = &template.RegistryAuth{Username: reg.Username, Password: reg.Password}
		case "gcp":
			// Google's registries take a service account key as the
			// password of the user _json_key.
			if reg.ServiceAccountJSON == "" {
				return nil, nil, nil, errors.New("fromImageRegistry: serviceAccountJson is required")
			}
			auth = &template.RegistryAuth{Username: "_json_key", Password: reg.ServiceAccountJSON}
		case "aws":
			return nil, nil, nil, errors.New("fromImageRegistry: AWS ECR credentials are not supported by space; pass an ECR token as type registry (username AWS, password from `aws ecr get-login-password`)")
		default:
			return nil, nil, nil, fmt.Errorf("fromImageRegistry: unknown type %q (registry, gcp)", reg.Type)
		}
	}
	var user, workdir string
	env := map[string]string{}
	var numbers []int
	for i, st := range req.Steps {
		n := i + 1 // E2B numbers the steps after the base
		bad := func(format string, args ...any) error {
			return fmt.Errorf("steps[%d] (%s): %s", i, st.Type, fmt.Sprintf(format, args...))
		}
		switch strings.ToUpper(st.Type) {
		case "RUN":
			if len(st.Args) < 1 || strings.TrimSpace(st.Args[0]) == "" {
				return nil, nil, nil, bad("a command is required")
			}
			u := user
			if len(st.Args) > 1 && st.Args[1] != "" {
				u = st.Args[1]
			}
			rec.Steps = append(rec.Steps, template.Step{Run: st.Args[0], User: u, Workdir: workdir, Env: clone(env)})
			numbers = append(numbers, n)
		case "COPY":
			if len(st.Args) < 2 || st.Args[0] == "" || st.Args[1] == "" {
				return nil, nil, nil, bad("source and destination are required")
			}
			if st.FilesHash == "" {
				return nil, nil, nil, bad("filesHash is required")
			}
			u := user
			if len(st.Args) > 2 && st.Args[2] != "" {
				u = st.Args[2]
			}
			mode := ""
			if len(st.Args) > 3 {
				mode = st.Args[3]
			}
			rec.Steps = append(rec.Steps, template.Step{User: u, Workdir: workdir,
				Copy: &template.CopyStep{Archive: st.FilesHash, Src: st.Args[0], Dest: st.Args[1], Mode: mode}})
			numbers = append(numbers, n)
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return nil, nil, nil, bad("want name, value pairs")
			}
			for j := 0; j < len(st.Args); j += 2 {
				env[st.Args[j]] = st.Args[j+1]
			}
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, nil, nil, bad("want one directory")
			}
			dir := st.Args[0]
			if !path.IsAbs(dir) {
				base := workdir
				if base == "" {
					base = "/"
				}
				dir = path.Join(base, dir)
			}
			workdir = path.Clean(dir)
		case "USER":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, nil, nil, bad("want one user")
			}
			user = st.Args[0]
		default:
			return nil, nil, nil, bad("unknown step type (RUN, COPY, ENV, WORKDIR, USER)")
		}
	}
	rec.User, rec.Workdir = user, workdir
	if len(env) > 0 {
		rec.Env = env
	}
	if err := rec.Validate(); err != nil {
		return nil, nil, nil, err
	}
	return rec, auth, numbers, nil
}

func clone(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
