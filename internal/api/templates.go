package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// TemplateBuild is what a build request carries besides its recipe.
type TemplateBuild struct {
	// Admin is set for admin keys: only their recipes may name host
	// paths (from: oci-layout:/oci-archive:, files: with host sources).
	Admin bool
	// Archive streams the uploaded OCI archive of a from: upload recipe;
	// nil without one. Submit reads it to the end or to ArchiveLimit
	// bytes, refusing it with ErrArchiveTooLarge beyond.
	Archive      io.Reader
	ArchiveLimit int64
}

// DefaultMaxTemplateArchive bounds uploaded template archives.
const DefaultMaxTemplateArchive = 2 << 30

// drainOversized is how much of an oversized upload is read past the
// limit before the connection is cut.
const drainOversized = 64 << 20

// Errors of a build request, returned wrapped by Templates.Submit.
var (
	// ErrHostPathsForbidden: a non-admin recipe named a host path (403).
	ErrHostPathsForbidden = errors.New("host paths in recipes need an admin key")
	// ErrArchiveTooLarge: the uploaded archive is over the limit (413).
	ErrArchiveTooLarge = errors.New("uploaded archive too large")
)

// createTemplate accepts a recipe as JSON ({name, recipe}), with a YAML
// content type as the raw recipe with ?name=, or as multipart/form-data
// with a "recipe" part (YAML) followed by an "archive" part (an OCI or
// docker-save tar) that a from: upload recipe builds from. The archive
// streams to the server's disk; Submit bounds it.
func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateTemplateRequest
	build := TemplateBuild{Admin: keyOf(r).Admin}
	ct := r.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "multipart/form-data"):
		s.createTemplateUpload(w, r, build)
		return
	case strings.Contains(ct, "yaml"):
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxJSONBody))
		if err != nil {
			s.fail(w, err)
			return
		}
		req = apiv1.CreateTemplateRequest{Name: r.URL.Query().Get("name"), Recipe: string(data)}
	default:
		if !s.readJSON(w, r, &req) {
			return
		}
	}
	s.submitTemplate(w, r, req.Name, req.Recipe, build)
}

// createTemplateUpload reads a multipart build request: the recipe part
// must come before the archive, so that a bad recipe is refused before
// any of the archive is stored.
func (s *Server) createTemplateUpload(w http.ResponseWriter, r *http.Request, build TemplateBuild) {
	build.ArchiveLimit = s.cfg.MaxTemplateArchive
	// A body whose declared length is over the limit is refused before
	// any of it is read (a client sending Expect: 100-continue then sends
	// none of it).
	if r.ContentLength > s.cfg.MaxTemplateArchive+s.cfg.MaxJSONBody+64<<10 {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%v: the limit is %d bytes, the request has %d", ErrArchiveTooLarge, s.cfg.MaxTemplateArchive, r.ContentLength))
		return
	}
	if !s.cfg.Uploads.Admit(w, keyOf(r).ID) {
		return
	}
	defer s.cfg.Uploads.Leave(keyOf(r).ID)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, "multipart body: "+err.Error())
		return
	}
	name := r.URL.Query().Get("name")
	var recipe []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "multipart body: "+err.Error())
			return
		}
		switch part.FormName() {
		case "name":
			b, _ := io.ReadAll(io.LimitReader(part, 256))
			name = strings.TrimSpace(string(b))
		case "recipe":
			if recipe, err = io.ReadAll(io.LimitReader(part, s.cfg.MaxJSONBody+1)); err != nil {
				writeError(w, http.StatusBadRequest, "multipart body: "+err.Error())
				return
			}
			if int64(len(recipe)) > s.cfg.MaxJSONBody {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("recipe larger than %d bytes", s.cfg.MaxJSONBody))
				return
			}
		case "archive":
			if recipe == nil {
				writeError(w, http.StatusBadRequest, `multipart body: the "recipe" part must come before the "archive" part`)
				return
			}
			build.Archive = part
			s.submitTemplate(w, r, name, string(recipe), build)
			return
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("multipart body: unknown part %q (want name, recipe, archive)", part.FormName()))
			return
		}
	}
	s.submitTemplate(w, r, name, string(recipe), build)
}

func (s *Server) submitTemplate(w http.ResponseWriter, r *http.Request, name, recipe string, build TemplateBuild) {
	if strings.TrimSpace(recipe) == "" {
		writeError(w, http.StatusBadRequest, "recipe is required (the YAML text of a template recipe)")
		return
	}
	t, err := s.cfg.Templates.Submit(scopeOf(r), name, []byte(recipe), build)
	switch {
	case errors.Is(err, ErrHostPathsForbidden):
		writeError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, ErrArchiveTooLarge):
		// Read (and drop) a bounded rest of the body, so that a client
		// still sending it sees the answer rather than a reset
		// connection; beyond that the connection is cut.
		_, _ = io.CopyN(io.Discard, build.Archive, drainOversized)
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case err != nil:
		s.fail(w, err)
	default:
		writeJSON(w, http.StatusAccepted, t)
	}
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	scope, ok := listScope(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, apiv1.TemplateList{Templates: s.cfg.Templates.List(scope)})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.cfg.Templates.Get(scopeOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	from := 0
	if v := r.URL.Query().Get("logs_from"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "logs_from must be a non-negative integer")
			return
		}
		from = n
	}
	// By id: the version found, not a later one built under the name. A
	// cluster's template has no id until its node built it.
	key := t.ID
	if key == "" {
		key = r.PathValue("name")
	}
	lines, _, err := s.cfg.Templates.Logs(scopeOf(r), key, from)
	if err != nil {
		s.fail(w, err)
		return
	}
	t.Logs = lines
	writeJSON(w, http.StatusOK, t)
}

// templateLogs streams a build's log lines as server-sent events and ends
// with a done event carrying the template.
func (s *Server) templateLogs(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	t, err := s.cfg.Templates.Get(scopeOf(r), name)
	if err != nil {
		s.fail(w, err)
		return
	}
	from := 0
	if v := r.URL.Query().Get("from"); v != "" {
		if from, err = strconv.Atoi(v); err != nil || from < 0 {
			writeError(w, http.StatusBadRequest, "from must be a non-negative integer")
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	key := t.ID // as getTemplate
	if key == "" {
		key = name
	}
	for {
		lines, done, err := s.cfg.Templates.Logs(scopeOf(r), key, from)
		if err != nil {
			return
		}
		for _, line := range lines {
			data, _ := json.Marshal(line)
			from++
			fmt.Fprintf(w, "event: log\nid: %d\ndata: %s\n\n", from, data)
		}
		if done {
			final, err := s.cfg.Templates.Get(scopeOf(r), name)
			if err == nil {
				data, _ := json.Marshal(final)
				fmt.Fprintf(w, "event: done\ndata: %s\n\n", data)
			}
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Templates.Delete(scopeOf(r), r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setPool sets how many sandboxes of the template are kept warm.
func (s *Server) setPool(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SetPoolRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	t, err := s.cfg.Templates.SetPool(scopeOf(r), r.PathValue("name"), req.Size)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
