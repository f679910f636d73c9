package redteam

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// fakeServer answers the server section's requests the way a bounded
// server does (bounded) or the way the unbounded one of issue #31 did,
// and records what the run made, sent and left behind.
type fakeServer struct {
	bounded bool

	mu        sync.Mutex
	sandboxes map[string]bool // live
	templates map[string]*apiv1.Template
	sessions  map[string][]apiv1.Session // by sandbox
	polls     map[string]int             // GETs of each session
	uploaded  int64                      // tag and archive bytes received
	nextID    int
}

const fakeGuardRefusal = "recipe: from: image <registry>: the registry's address is not public"

func newFakeServer(bounded bool) *fakeServer {
	return &fakeServer{bounded: bounded, sandboxes: map[string]bool{}, templates: map[string]*apiv1.Template{},
		sessions: map[string][]apiv1.Session{}, polls: map[string]int{}}
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", f.createSandbox)
	mux.HandleFunc("GET /v1/sandboxes/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		writeFake(w, http.StatusOK, apiv1.Sandbox{ID: r.PathValue("id"), State: apiv1.StateRunning})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		delete(f.sandboxes, r.PathValue("id"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/sessions", f.createSession)
	mux.HandleFunc("GET /v1/sandboxes/{id}/sessions", f.listSessions)
	mux.HandleFunc("GET /v1/sandboxes/{id}/sessions/{sid}", f.getSession)
	mux.HandleFunc("POST /v1/sandboxes/{id}/sessions/{sid}/signal", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/templates", f.createTemplate)
	mux.HandleFunc("GET /v1/templates/{name}", f.getTemplate)
	mux.HandleFunc("DELETE /v1/templates/{name}", f.deleteTemplate)
	return mux
}

func writeFake(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fakeError(w http.ResponseWriter, status int, msg string) {
	writeFake(w, status, apiv1.Error{Code: status, Message: msg})
}

// createSandbox holds the project to one sandbox.
func (f *fakeServer) createSandbox(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sandboxes) >= 1 {
		fakeError(w, http.StatusTooManyRequests, "project quota: 1 of 1 sandboxes")
		return
	}
	f.nextID++
	id := fmt.Sprintf("sb%d", f.nextID)
	f.sandboxes[id] = true
	writeFake(w, http.StatusAccepted, apiv1.Sandbox{ID: id, State: apiv1.StateStarting})
}

// createSession: bounded, tags are at most 1 KiB and a sandbox keeps
// 64 sessions, forgetting the oldest.
func (f *fakeServer) createSession(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSessionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fakeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploaded += int64(len(req.Tag))
	if f.bounded && len(req.Tag) > 1<<10 {
		fakeError(w, http.StatusBadRequest, fmt.Sprintf("tag is %d bytes, at most 1024", len(req.Tag)))
		return
	}
	id := r.PathValue("id")
	f.nextID++
	s := apiv1.Session{ID: fmt.Sprintf("s%d", f.nextID), Cmd: req.Cmd, Tag: req.Tag, State: apiv1.SessionRunning}
	f.sessions[id] = append(f.sessions[id], s)
	if f.bounded && len(f.sessions[id]) > 64 {
		f.sessions[id] = f.sessions[id][1:]
	}
	writeFake(w, http.StatusCreated, s)
}

// listSessions: bounded, pages of 20.
func (f *fakeServer) listSessions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	all := f.sessions[r.PathValue("id")]
	f.mu.Unlock()
	if !f.bounded {
		writeFake(w, http.StatusOK, apiv1.SessionList{Sessions: all})
		return
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	to := min(from+20, len(all))
	page := map[string]any{"sessions": all[from:to]}
	if to < len(all) {
		page["next_cursor"] = strconv.Itoa(to)
	}
	writeFake(w, http.StatusOK, page)
}

// getSession: each GET finds 64 MiB more output; bounded, the output
// stops at 32 MiB (the process held back); unbounded, all of it is kept.
func (f *fakeServer) getSession(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sid := r.PathValue("sid")
	f.polls[sid]++
	out := int64(f.polls[sid]) * 64 << 20
	if f.bounded {
		out = min(out, 32<<20)
	}
	writeFake(w, http.StatusOK, apiv1.Session{ID: sid, State: apiv1.SessionRunning, OutputBytes: out})
}

func (f *fakeServer) createTemplate(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		f.upload(w, r)
		return
	}
	var req apiv1.CreateTemplateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fakeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch ref, isImage := strings.CutPrefix(strings.TrimSpace(req.Recipe), "from: image:"); {
	case isImage:
		f.pull(w, r, ref)
	case strings.HasPrefix(req.Recipe, "from: minimal"):
		// The project holds its one sandbox: a build is one more.
		if f.bounded {
			fakeError(w, http.StatusTooManyRequests, "project quota: 1 of 1 sandboxes (builds count)")
			return
		}
		f.addTemplate(w, req.Name, apiv1.TemplateBuilding, "", 0)
	default:
		fakeError(w, http.StatusBadRequest, "unexpected recipe "+req.Recipe)
	}
}

// pull: bounded, every registry gets the guard's refusal; unbounded, only
// loopback does, and the reserved ranges are dialled (one answers late,
// one with a dial error).
func (f *fakeServer) pull(w http.ResponseWriter, r *http.Request, ref string) {
	host := ref[:strings.IndexAny(ref, ":/")]
	switch {
	case f.bounded || host == "127.0.0.1":
		fakeError(w, http.StatusBadRequest, strings.ReplaceAll(fakeGuardRefusal, "<registry>", ref))
	case host == "240.0.0.1":
		fakeError(w, http.StatusBadRequest, "recipe: from: image "+ref+": dial tcp 240.0.0.1:9: connect: network is unreachable")
	default:
		<-r.Context().Done()
	}
}

// upload takes a from: upload build: bounded, it fails at the disk
// limit; unbounded, it is built at the size its layer unpacks to.
func (f *fakeServer) upload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		fakeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := ""
	for {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(part)
		switch part.FormName() {
		case "name":
			name = string(b)
		case "archive":
			f.mu.Lock()
			f.uploaded += int64(len(b))
			f.mu.Unlock()
		}
	}
	if f.bounded {
		f.addTemplate(w, name, apiv1.TemplateFailed, "unpacking the image passed the build's disk limit (4096 MiB)", 0)
		return
	}
	f.addTemplate(w, name, apiv1.TemplateReady, "", 5<<30)
}

func (f *fakeServer) addTemplate(w http.ResponseWriter, name, state, reason string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &apiv1.Template{Name: name, State: state, Reason: reason, SizeBytes: size}
	f.templates[name] = t
	writeFake(w, http.StatusAccepted, t)
}

func (f *fakeServer) getTemplate(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.templates[r.PathValue("name")]
	if !ok {
		fakeError(w, http.StatusNotFound, "no such template")
		return
	}
	writeFake(w, http.StatusOK, t)
}

// deleteTemplate refuses a building template once (409), as the server
// does, and finishes its build.
func (f *fakeServer) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.templates[r.PathValue("name")]
	switch {
	case !ok:
		fakeError(w, http.StatusNotFound, "no such template")
	case t.State == apiv1.TemplateBuilding:
		t.State = apiv1.TemplateReady
		fakeError(w, http.StatusConflict, "template is still building")
	default:
		delete(f.templates, r.PathValue("name"))
		w.WriteHeader(http.StatusNoContent)
	}
}

// runFake plays the whole section against a fake server with short
// polls and timeouts and a small bomb.
func runFake(t *testing.T, f *fakeServer, cfg ServerConfig) *Report {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	cfg.URL, cfg.APIKey = srv.URL, "project-key"
	cfg.BombBytes = 16 << 20
	cfg.MaxSessions = 100
	cfg.poll, cfg.timeScale = 5*time.Millisecond, 0.1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	report, err := RunServer(ctx, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, r := range report.Results {
		t.Logf("%-6s %-40s %s", r.Outcome, r.Name, r.Evidence)
	}
	return report
}

// checkLeftovers fails the test for anything the run left on the server.
func checkLeftovers(t *testing.T, f *fakeServer, budget int64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sandboxes) != 0 || len(f.templates) != 0 {
		t.Errorf("the run left sandboxes %v and templates %v", f.sandboxes, f.templates)
	}
	if f.uploaded > budget {
		t.Errorf("the run sent %d bytes, past its budget of %d", f.uploaded, budget)
	}
}

func wantOutcomes(t *testing.T, report *Report, want Outcome) {
	t.Helper()
	checks := 0
	for _, a := range ServerAttacks() {
		checks += len(a.Checks)
	}
	if len(report.Results) != checks {
		t.Fatalf("%d results, want one per check (%d)", len(report.Results), checks)
	}
	for _, r := range report.Results {
		if r.Outcome != want || r.Evidence == "" || r.Category != ServerSection {
			t.Errorf("%s: %s (%s), want %s with evidence", r.Name, r.Outcome, r.Evidence, want)
		}
	}
}

// Against a server that answers with its bounds, every check holds, and
// the run takes back all it made.
func TestServerSectionHeld(t *testing.T) {
	f := newFakeServer(true)
	report := runFake(t, f, ServerConfig{})
	wantOutcomes(t, report, Held)
	if failures := report.Failures(); len(failures) != 0 {
		t.Errorf("a held run fails: %v", failures)
	}
	checkLeftovers(t, f, DefaultMaxUploadBytes)
}

// Against the unbounded server of the issue, every check breaks, with the
// figures that show it, and the run stays within its own budget.
func TestServerSectionBroke(t *testing.T) {
	f := newFakeServer(false)
	const budget = 12 << 20
	report := runFake(t, f, ServerConfig{MaxUploadBytes: budget})
	wantOutcomes(t, report, Broke)
	evidence := map[string]string{}
	for _, r := range report.Results {
		evidence[r.Name] = r.Evidence
	}
	for name, want := range map[string]string{
		"session tag of 1 MiB":                 "1.0 MiB was created",
		"sessions per sandbox":                 "1048576-byte tags",
		"session listing":                      "passed 8.0 MiB",
		"session output spill past disk_mb":    "past 544.0 MiB",
		"gzip-bomb template upload":            "ready template of 5120.0 MiB",
		"build storm past the project's quota": "4 of 4 builds were accepted",
		"registry probes of reserved ranges":   "240.0.0.1:9: 400",
	} {
		if !strings.Contains(evidence[name], want) {
			t.Errorf("%s: evidence %q lacks %q", name, evidence[name], want)
		}
	}
	if len(report.Failures()) != len(report.Results) {
		t.Errorf("broken bounds do not fail the run: %d failures of %d", len(report.Failures()), len(report.Results))
	}
	checkLeftovers(t, f, budget)
}

// --name picks one attack, or one check of the session flood (which
// still runs the whole flood, reporting only the check named).
func TestServerSectionSelect(t *testing.T) {
	report := runFake(t, newFakeServer(true), ServerConfig{Names: []string{"session listing"}})
	if len(report.Results) != 1 || report.Results[0].Name != "session listing" || report.Results[0].Outcome != Held {
		t.Fatalf("results: %+v", report.Results)
	}
	if got := selectServer(ServerAttacks(), []string{"no such attack"}); len(got) != 0 {
		t.Errorf("unknown name selected %d attacks", len(got))
	}
}

// The bomb is what it claims: a docker-save archive whose one gzip layer
// is a tar of one file at least as large as asked, from about a
// thousandth of that.
func TestBombArchive(t *testing.T) {
	const unpacked = 16 << 20
	archive, err := bombArchive(unpacked, "bomb")
	if err != nil {
		t.Fatal(err)
	}
	if len(archive) > unpacked/500 {
		t.Errorf("the archive is %d bytes for %d unpacked", len(archive), unpacked)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json %s: %v", files["manifest.json"], err)
	}
	if files[manifest[0].Config] == nil {
		t.Fatalf("no config %s", manifest[0].Config)
	}
	gz, err := gzip.NewReader(bytes.NewReader(files[manifest[0].Layers[0]]))
	if err != nil {
		t.Fatal(err)
	}
	lt := tar.NewReader(gz)
	h, err := lt.Next()
	if err != nil || h.Name != "bomb" || h.Size < unpacked {
		t.Fatalf("layer's first entry: %+v, %v", h, err)
	}
	n, err := io.Copy(io.Discard, lt)
	if err != nil || n != h.Size {
		t.Fatalf("read %d of %d bytes: %v", n, h.Size, err)
	}
	if _, err := lt.Next(); err != io.EOF {
		t.Errorf("after the file: %v, want the end of the tar", err)
	}
}
