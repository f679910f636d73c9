package api

import (
	"net/http"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/pkg/apiv1"
)

// lifecycleAction serves pause, resume and suspend: each answers with the
// sandbox once the transition is done.
func (s *Server) lifecycleAction(act func(*Server, *http.Request, string) (controlplane.Sandbox, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := act(s, r, r.PathValue("id"))
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s.cp.View(sb))
	}
}

func pauseAction(s *Server, r *http.Request, id string) (controlplane.Sandbox, error) {
	return s.cp.Pause(r.Context(), id)
}

func resumeAction(s *Server, r *http.Request, id string) (controlplane.Sandbox, error) {
	return s.cp.Resume(r.Context(), id)
}

// suspendSandbox is POST /v1/sandboxes/{id}/suspend; an optional body
// (SuspendRequest) can drop the memory and keep only the disk.
func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SuspendRequest
	if r.ContentLength != 0 && !s.readJSON(w, r, &req) {
		return
	}
	opts := controlplane.SuspendOptions{DropMemory: req.KeepMemory != nil && !*req.KeepMemory}
	sb, err := s.cp.SuspendWith(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSnapshotRequest
	if r.ContentLength != 0 && !s.readJSON(w, r, &req) {
		return
	}
	snap, err := s.cp.CreateSnapshot(r.Context(), r.PathValue("id"), req.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap.API())
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	snaps, err := s.cp.Snapshots(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(snaps) == 0 {
		// Distinguish "no snapshots" from "no such sandbox".
		if _, err := s.cp.Get(scopeOf(r), r.PathValue("id")); err != nil {
			s.fail(w, err)
			return
		}
	}
	out := apiv1.SnapshotList{Snapshots: []apiv1.Snapshot{}}
	for _, snap := range snaps {
		out.Snapshots = append(out.Snapshots, snap.API())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.cp.DeleteSnapshot(r.PathValue("id"), r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var req apiv1.RestoreRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.Snapshot == "" {
		writeError(w, http.StatusBadRequest, "snapshot is required (a name of this sandbox's snapshots, <sandbox>/<name>, or a snapshot id)")
		return
	}
	// The snapshot named in the body must be the key's project's too.
	sb, err := s.cp.Restore(r.Context(), scopeOf(r), r.PathValue("id"), req.Snapshot)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.cp.View(sb))
}

func (s *Server) branch(w http.ResponseWriter, r *http.Request) {
	req := apiv1.BranchRequest{Count: 1}
	if r.ContentLength != 0 && !s.readJSON(w, r, &req) {
		return
	}
	branches, err := s.cp.Branch(r.Context(), r.PathValue("id"), req.Count, req.TimeoutS)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := apiv1.BranchResult{Sandboxes: []apiv1.Sandbox{}}
	for _, b := range branches {
		out.Sandboxes = append(out.Sandboxes, s.cp.View(b))
	}
	writeJSON(w, http.StatusCreated, out)
}
