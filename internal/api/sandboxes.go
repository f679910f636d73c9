package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/pkg/apiv1"
)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSandboxRequest
	if !s.readJSON(w, r, &req) || !credentialsNeedAdmin(w, r, req) {
		return
	}
	sb, err := s.cp.Create(scopeOf(r), req)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.cp.View(sb))
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	scope, ok := listScope(w, r)
	if !ok {
		return
	}
	f := controlplane.Filter{State: r.URL.Query().Get("state"), Metadata: map[string]string{}}
	for k, vs := range r.URL.Query() {
		if name, ok := strings.CutPrefix(k, "metadata."); ok && len(vs) > 0 {
			f.Metadata[name] = vs[0]
		}
	}
	out := apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{}}
	for _, sb := range s.cp.List(scope, f) {
		out.Sandboxes = append(out.Sandboxes, s.cp.View(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.cp.Get(scopeOf(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}

// sandboxStates are the states GET .../wait can wait for; any other would
// wait until the timeout for nothing.
var sandboxStates = map[string]bool{
	apiv1.StateStarting: true, apiv1.StateRunning: true, apiv1.StatePausing: true, apiv1.StatePaused: true,
	apiv1.StateSuspending: true, apiv1.StateSuspended: true, apiv1.StateResuming: true,
	apiv1.StateSnapshotting: true, apiv1.StateStopping: true, apiv1.StateStopped: true, apiv1.StateFailed: true,
}

// maxWait bounds GET .../wait so a forgotten client does not hold a request forever.
const maxWait = 10 * time.Minute

func (s *Server) waitSandbox(w http.ResponseWriter, r *http.Request) {
	state := r.URL.Query().Get("state")
	if state == "" {
		state = apiv1.StateRunning
	}
	if !sandboxStates[state] {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q is not a sandbox state (%s)", state, strings.Join(slices.Sorted(maps.Keys(sandboxStates)), ", ")))
		return
	}
	timeout := 60 * time.Second
	if v := r.URL.Query().Get("timeout_s"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "timeout_s must be a non-negative integer")
			return
		}
		timeout = min(time.Duration(n)*time.Second, maxWait)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	sb, err := s.cp.Wait(ctx, r.PathValue("id"), state)
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusRequestTimeout, "sandbox "+sb.ID+" is "+sb.State+" after "+timeout.String()+"; still waiting for "+state)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.cp.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SetTimeoutRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	sb, err := s.cp.SetTimeout(r.PathValue("id"), req.TimeoutS)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}

func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request) {
	events, err := s.cp.Events(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.SandboxEventList{Events: events})
}
