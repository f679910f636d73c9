package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// createV1 is POST /sandboxes (JS ≤ 2.45, Python 2.21). `secure: false`
// still gets an access token: space's agent always checks one, and the
// SDKs send whatever token the API returns.
func (h *Handler) createV1(w http.ResponseWriter, r *http.Request) { h.create(w, r) }

// createV2 is POST /v2/sandboxes (JS 2.51): always secured.
func (h *Handler) createV2(w http.ResponseWriter, r *http.Request) { h.create(w, r) }

// create starts a sandbox and answers only once it runs: the SDKs talk to
// envd immediately after the 201.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	present, ok := readJSON(w, r, &req)
	if !ok {
		return
	}
	if !present {
		writeError(w, http.StatusBadRequest, "request body is empty; expected a JSON object with templateID")
		return
	}
	if req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	if msg := req.unsupported(); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if msg := h.mcpRefused(scopeOf(r), &req); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	creq, msg := req.request()
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if !h.checkRules(w, r, creq.Credentials) {
		return
	}
	sb, err := h.cfg.ControlPlane.Create(scopeOf(r), creq)
	if errors.Is(err, controlplane.ErrUnknownTemplate) {
		// E2B starts sandboxes from snapshots by passing the snapshot's
		// id as the template.
		if snap, serr := h.cfg.ControlPlane.ResolveSnapshot(scopeOf(r), snapshotRef(req.TemplateID)); serr == nil {
			creq.Template, creq.Snapshot = "", snap.ID
			sb, err = h.cfg.ControlPlane.Create(scopeOf(r), creq)
		} else {
			err = fmt.Errorf("template %q not found: use base, a template built with `space template build`, or a snapshot id (%w)",
				req.TemplateID, controlplane.ErrUnknownTemplate)
		}
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	running, err := h.waitRunning(r.Context(), sb.ID)
	if err != nil {
		h.startFailed(w, sb.ID, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxView(running))
}

// waitRunning waits until a sandbox runs, bounded by the start timeout.
func (h *Handler) waitRunning(ctx context.Context, id string) (controlplane.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StartTimeout)
	defer cancel()
	s, err := h.cfg.ControlPlane.Wait(ctx, id, apiv1.StateRunning)
	if err != nil {
		return s, fmt.Errorf("sandbox %s did not start: %w", id, err)
	}
	return s, nil
}

// startFailed answers a create whose sandbox never ran, and removes it: to
// E2B a sandbox that failed to start does not exist.
func (h *Handler) startFailed(w http.ResponseWriter, id string, err error) {
	if derr := h.cfg.ControlPlane.Delete(context.Background(), id); derr != nil && !errors.Is(derr, controlplane.ErrNotFound) {
		h.log.Warn("remove sandbox that failed to start", "sandbox", id, "err", derr)
	}
	status := http.StatusInternalServerError
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	writeError(w, status, err.Error())
}

// visible returns a sandbox E2B would show: not stopped, not failed.
func (h *Handler) visible(id string) (controlplane.Sandbox, error) {
	// The route was scoped already (Handler.scoped); this sees every
	// project so that handlers need no scope of their own.
	s, err := h.cfg.ControlPlane.Get(project.Everything, id)
	if err != nil {
		return s, sandboxNotFound(id)
	}
	if _, ok := e2bState(s.State); !ok {
		msg := s.State
		if s.Reason != "" {
			msg += ": " + s.Reason
		}
		return s, fmt.Errorf("sandbox %q not found (it is %s): %w", id, msg, controlplane.ErrNotFound)
	}
	return s, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	s, err := h.visible(r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.detailView(s))
}

// kill is DELETE /sandboxes/{id}: 204, or 404 with a JSON body (the JS SDK
// then returns false). A sandbox that already ended is forgotten too.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	_, visErr := h.visible(id)
	if err := h.cfg.ControlPlane.Delete(r.Context(), id); err != nil {
		h.fail(w, err)
		return
	}
	if visErr != nil {
		h.fail(w, visErr)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is the body of /timeout and /connect.
type timeoutBody struct {
	Timeout *int `json:"timeout"`
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body timeoutBody
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	if body.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout (seconds) is required")
		return
	}
	if _, err := h.visible(id); err != nil {
		h.fail(w, err)
		return
	}
	if _, err := h.cfg.ControlPlane.SetTimeout(id, *body.Timeout); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause is POST /sandboxes/{id}/pause, space's durable suspend: memory,
// processes and files survive, CPU and memory are released. 409 when the
// sandbox is paused already (the SDK then returns false).
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Memory *bool `json:"memory"`
	}
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	s, err := h.visible(id)
	if err != nil {
		h.fail(w, err)
		return
	}
	switch s.State {
	case apiv1.StateSuspended, apiv1.StateSuspending:
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", id))
		return
	case apiv1.StateStarting, apiv1.StateResuming:
		if _, err := h.waitRunning(r.Context(), id); err != nil {
			h.fail(w, err)
			return
		}
	}
	// memory false is a filesystem-only pause (life.go).
	if _, err := h.cfg.ControlPlane.SuspendWith(r.Context(), id, pauseOptions(body.Memory)); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resumeDeprecated is the old POST /sandboxes/{id}/resume: 201 Sandbox, or
// 409 if it is not paused.
func (h *Handler) resumeDeprecated(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body timeoutBody
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	s, err := h.visible(id)
	if err != nil {
		h.fail(w, err)
		return
	}
	if state, _ := e2bState(s.State); state != "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is not paused", id))
		return
	}
	h.connect(w, r, id, body.Timeout, false)
}

func (h *Handler) connectV1(w http.ResponseWriter, r *http.Request) { h.connectRoute(w, r) }
func (h *Handler) connectV2(w http.ResponseWriter, r *http.Request) { h.connectRoute(w, r) }

func (h *Handler) connectRoute(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Timeout *int `json:"timeout"`
		// Memory false is the SDKs' onResume: 'reboot'.
		Memory *bool `json:"memory"`
	}
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	h.connect(w, r, r.PathValue("id"), body.Timeout, body.Memory != nil && !*body.Memory)
}

// connect answers 200 with a running sandbox, or resumes a paused one and
// answers 201; with reboot the resume boots the disk afresh, ignoring any
// memory image (a running sandbox is left as it is, as on E2B). A timeout
// given moves the sandbox's end later (never earlier, as E2B does).
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, id string, timeoutS *int, reboot bool) {
	if timeoutS != nil && *timeoutS < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout must be a positive number of seconds, got %d", *timeoutS))
		return
	}
	s, err := h.visible(id)
	if err != nil {
		h.fail(w, err)
		return
	}
	status := http.StatusOK
	switch s.State {
	case apiv1.StateRunning:
	case apiv1.StatePaused, apiv1.StateSuspended, apiv1.StateSuspending:
		if s.State == apiv1.StateSuspending {
			if s, err = h.cfg.ControlPlane.Wait(r.Context(), id, apiv1.StateSuspended); err != nil {
				h.fail(w, err)
				return
			}
		}
		resume := h.cfg.ControlPlane.Resume
		if reboot {
			resume = h.cfg.ControlPlane.ResumeFromDisk
		}
		status = http.StatusCreated
		if s, err = resume(r.Context(), id); err != nil {
			// Someone else resumed it first (the proxy does on traffic,
			// e.g. an SDK re-opening a command stream after the pause):
			// connect finds it running, as E2B's does, rather than 409.
			var se *controlplane.StateError
			if !errors.As(err, &se) || (se.State != apiv1.StateRunning && se.State != apiv1.StateResuming) {
				h.fail(w, fmt.Errorf("resume sandbox %s: %w", id, err))
				return
			}
			if s, err = h.waitRunning(r.Context(), id); err != nil {
				h.fail(w, err)
				return
			}
			status = http.StatusOK
		}
	default:
		if s, err = h.waitRunning(r.Context(), id); err != nil {
			h.fail(w, err)
			return
		}
	}
	if timeoutS != nil && *timeoutS > 0 && time.Now().Add(time.Duration(*timeoutS)*time.Second).After(s.ExpiresAt) {
		if s, err = h.cfg.ControlPlane.SetTimeout(id, *timeoutS); err != nil {
			h.fail(w, err)
			return
		}
	}
	writeJSON(w, status, h.sandboxView(s))
}

// fork is POST /sandboxes/{id}/fork, space's branch: 201 with one entry
// per requested sandbox, each running before the answer.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	count, timeoutS := 1, 0
	if body.Count != nil {
		count = *body.Count
	}
	if body.Timeout != nil {
		timeoutS = *body.Timeout
	}
	s, err := h.visible(id)
	if err != nil {
		h.fail(w, err)
		return
	}
	if s.State == apiv1.StateSuspended {
		// A branch captures live memory; bring the source back first.
		if _, err := h.cfg.ControlPlane.Resume(r.Context(), id); err != nil {
			h.fail(w, fmt.Errorf("resume sandbox %s to fork it: %w", id, err))
			return
		}
	}
	branches, err := h.cfg.ControlPlane.Branch(r.Context(), id, count, timeoutS)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := make([]forkResult, len(branches))
	for i, b := range branches {
		running, err := h.waitRunning(r.Context(), b.ID)
		if err != nil {
			out[i] = forkResult{Error: &apiError{Code: http.StatusInternalServerError, Message: err.Error()}}
			continue
		}
		view := h.sandboxView(running)
		out[i] = forkResult{Sandbox: &view}
	}
	writeJSON(w, http.StatusCreated, out)
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Name string `json:"name"`
	}
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	if _, err := h.visible(id); err != nil {
		h.fail(w, err)
		return
	}
	snap, err := h.cfg.ControlPlane.CreateSnapshot(r.Context(), id, body.Name)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: snap.ID, Names: []string{snap.Name}})
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := pageLimit(w, q)
	if !ok {
		return
	}
	all, err := h.cfg.ControlPlane.Snapshots(q.Get("sandboxID"))
	if err != nil {
		h.fail(w, err)
		return
	}
	name := q.Get("name")
	scope := scopeOf(r)
	var keys []pageKey
	var items []snapshotInfo
	for _, s := range all {
		if !scope.Sees(s.Project) || name != "" && s.Name != name && s.ID != snapshotRef(name) {
			continue
		}
		keys = append(keys, pageKey{s.CreatedAt, s.ID})
		items = append(items, snapshotInfo{SnapshotID: s.ID, Names: []string{s.Name}})
	}
	from, to, next, ok := page(w, keys, q.Get("nextToken"), limit)
	if !ok {
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := items[from:to]
	if out == nil {
		out = []snapshotInfo{}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot is DELETE /templates/{id}: E2B deletes snapshots as
// templates. Space's templates are managed with its own API, so only
// snapshots are found here.
func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	snap, err := h.cfg.ControlPlane.ResolveSnapshot(scopeOf(r), snapshotRef(id))
	if err != nil {
		snapshotNotFound(w, id)
		return
	}
	if err := h.cfg.ControlPlane.DeleteSnapshot(snap.SandboxID, snap.Name); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listV1 is GET /sandboxes: the running sandboxes, unpaged.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	md, ok := metadataFilter(w, q)
	if !ok {
		return
	}
	out := []listedSandbox{}
	for _, s := range h.cfg.ControlPlane.List(scopeOf(r), controlplane.Filter{Metadata: md}) {
		if state, ok := e2bState(s.State); ok && state == "running" {
			out = append(out, listedView(s))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listV2 is GET /v2/sandboxes with metadata and state filters and paging.
func (h *Handler) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	md, ok := metadataFilter(w, q)
	if !ok {
		return
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "":
			case "running", "paused":
				states[st] = true
			default:
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state must be running or paused, got %q", st))
				return
			}
		}
	}
	limit, ok := pageLimit(w, q)
	if !ok {
		return
	}
	desc, ok := listOrder(w, q)
	if !ok {
		return
	}
	var startedAfter time.Time
	if raw := q.Get("startedAfter"); raw != "" {
		t, err := time.Parse(time.RFC3339, raw)
		if err != nil {
			writeError(w, http.StatusBadRequest, "startedAfter must be an RFC 3339 time: "+err.Error())
			return
		}
		startedAfter = t
	}
	template := q.Get("template")
	var keys []pageKey
	var items []listedSandbox
	running := 0
	for _, s := range h.cfg.ControlPlane.List(scopeOf(r), controlplane.Filter{Metadata: md}) {
		state, ok := e2bState(s.State)
		if !ok || (len(states) > 0 && !states[state]) || (template != "" && s.TemplateName() != template) {
			continue
		}
		if !startedAfter.IsZero() && (s.StartedAt == nil || !s.StartedAt.After(startedAfter)) {
			continue
		}
		if state == "running" {
			running++
		}
		keys = append(keys, pageKey{startedAt(s), s.ID})
		items = append(items, listedView(s))
	}
	sortPage(keys, items, desc)
	from, to, next, ok := pageIn(w, keys, q.Get("nextToken"), limit, desc)
	if !ok {
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	out := items[from:to]
	if out == nil {
		out = []listedSandbox{}
	}
	writeJSON(w, http.StatusOK, out)
}

// metadataFilter parses `metadata`, itself URL-encoded `k=v&k2=v2` as the
// SDKs send it. JS SDKs percent-encode keys and values once more before
// building that string, so they are unescaped again where that is valid.
func metadataFilter(w http.ResponseWriter, q url.Values) (map[string]string, bool) {
	raw := q.Get("metadata")
	if raw == "" {
		return nil, true
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "metadata must be URL-encoded key=value pairs: "+err.Error())
		return nil, false
	}
	md := map[string]string{}
	for k, v := range vals {
		md[unescapeOnce(k)] = unescapeOnce(v[len(v)-1])
	}
	return md, true
}

func unescapeOnce(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// Paging: items are in the order of their keys (creation or start time,
// then id); a token names the last item of the previous page, so pages
// stay right when sandboxes come and go or change state in between.
const (
	defaultPageLimit = 100
	maxPageLimit     = 100
)

type pageKey struct {
	created time.Time
	id      string
}

func pageLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	raw := q.Get("limit")
	if raw == "" {
		return defaultPageLimit, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxPageLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be between 1 and %d, got %q", maxPageLimit, raw))
		return 0, false
	}
	return n, true
}

// listOrder reads `order`: E2B lists sandboxes newest first unless asked
// for asc.
func listOrder(w http.ResponseWriter, q url.Values) (desc, ok bool) {
	switch raw := q.Get("order"); raw {
	case "", "desc":
		return true, true
	case "asc":
		return false, true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("order must be asc or desc, got %q", raw))
		return false, false
	}
}

// startedAt is the time a listed sandbox shows as startedAt, and sorts by.
// It never changes once set (a resume keeps it), so pages stay stable.
func startedAt(s controlplane.Sandbox) time.Time {
	if s.StartedAt != nil {
		return *s.StartedAt
	}
	return s.CreatedAt
}

// sortPage sorts keys, and items with them, ascending or descending.
func sortPage[T any](keys []pageKey, items []T, desc bool) {
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return keyAfter(keys[idx[b]], keys[idx[a]], desc) })
	sortedKeys, sortedItems := make([]pageKey, len(keys)), make([]T, len(items))
	for i, j := range idx {
		sortedKeys[i], sortedItems[i] = keys[j], items[j]
	}
	copy(keys, sortedKeys)
	copy(items, sortedItems)
}

// page selects ascending keys[from:to] after token; next is the token of
// the following page, "" when there is none.
func page(w http.ResponseWriter, keys []pageKey, token string, limit int) (from, to int, next string, ok bool) {
	return pageIn(w, keys, token, limit, false)
}

// pageIn is page over keys sorted ascending or, with desc, descending.
// A token carries its direction: one issued for the other order is
// refused rather than read backwards.
func pageIn(w http.ResponseWriter, keys []pageKey, token string, limit int, desc bool) (from, to int, next string, ok bool) {
	prefix := ""
	if desc {
		prefix = "d"
	}
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		body, descToken := strings.CutPrefix(string(raw), "d")
		if err == nil && descToken != desc {
			writeError(w, http.StatusBadRequest, "nextToken was issued for the other order; list again from the first page")
			return 0, 0, "", false
		}
		nanos, id, cut := strings.Cut(body, "_")
		n, perr := strconv.ParseInt(nanos, 10, 64)
		if err != nil || !cut || perr != nil || id == "" {
			writeError(w, http.StatusBadRequest, "nextToken is not a token this server issued")
			return 0, 0, "", false
		}
		after := pageKey{time.Unix(0, n), id}
		for from < len(keys) && !keyAfter(keys[from], after, desc) {
			from++
		}
	}
	to = min(from+limit, len(keys))
	if to < len(keys) {
		last := keys[to-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(prefix + strconv.FormatInt(last.created.UnixNano(), 10) + "_" + last.id))
	}
	return from, to, next, true
}

// keyAfter reports whether k comes after `after` in the order (ties on
// time are broken by id, in the same direction).
func keyAfter(k, after pageKey, desc bool) bool {
	if k.created.Equal(after.created) {
		if desc {
			return k.id < after.id
		}
		return k.id > after.id
	}
	if desc {
		return k.created.Before(after.created)
	}
	return k.created.After(after.created)
}
