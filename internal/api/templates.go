package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// createTemplate accepts a recipe as JSON ({name, recipe}) or, with a YAML
// content type, as the raw recipe with ?name=.
func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateTemplateRequest
	if ct := r.Header.Get("Content-Type"); strings.Contains(ct, "yaml") {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxJSONBody))
		if err != nil {
			s.fail(w, err)
			return
		}
		req = apiv1.CreateTemplateRequest{Name: r.URL.Query().Get("name"), Recipe: string(data)}
	} else if !s.readJSON(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Recipe) == "" {
		writeError(w, http.StatusBadRequest, "recipe is required (the YAML text of a template recipe)")
		return
	}
	t, err := s.cfg.Templates.Submit(scopeOf(r), req.Name, []byte(req.Recipe))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, t)
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
	lines, _, err := s.cfg.Templates.Logs(scopeOf(r), t.ID, from)
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
	for {
		lines, done, err := s.cfg.Templates.Logs(scopeOf(r), t.ID, from)
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
