package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// usageTimeout bounds how long a volume's view waits for its node's usage
// figure; past it the view goes out without one.
const usageTimeout = 5 * time.Second

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateVolumeRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	v, err := s.cp.CreateVolume(r.Context(), scopeOf(r), req)
	if err != nil {
		s.fail(w, err)
		return
	}
	var used int64
	writeJSON(w, http.StatusCreated, s.cp.VolumeAPI(v, &used))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	scope, ok := listScope(w, r)
	if !ok {
		return
	}
	vols, err := s.cp.Volumes(scope)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := apiv1.VolumeList{Volumes: []apiv1.Volume{}}
	for _, v := range vols {
		out.Volumes = append(out.Volumes, s.cp.VolumeAPI(v, nil))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, ok := s.volume(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), usageTimeout)
	defer cancel()
	var used *int64
	if n, err := s.cp.VolumeUsage(ctx, v); err == nil {
		used = &n
	} else {
		s.log.Warn("volume usage", "volume", v.ID, "err", err)
	}
	writeJSON(w, http.StatusOK, s.cp.VolumeAPI(v, used))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.cp.DeleteVolume(r.Context(), scopeOf(r), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volume is the volume the path names (the scoped check found it).
func (s *Server) volume(w http.ResponseWriter, r *http.Request) (controlplane.Volume, bool) {
	v, err := s.cp.ResolveVolume(scopeOf(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return v, false
	}
	return v, true
}

// volumeFile reads the path query parameter and finds the volume the path
// names and its node's store, for the files routes.
func (s *Server) volumeFile(w http.ResponseWriter, r *http.Request) (string, string, controlplane.VolumeStore, bool) {
	p, ok := filePath(w, r)
	if !ok {
		return "", "", nil, false
	}
	st, name, ok := s.volumeStore(w, r)
	return p, name, st, ok
}

// volumeStore is the node's store of the volume the path names, and the
// volume's name there.
func (s *Server) volumeStore(w http.ResponseWriter, r *http.Request) (controlplane.VolumeStore, string, bool) {
	v, ok := s.volume(w, r)
	if !ok {
		return nil, "", false
	}
	st, err := s.cp.VolumeStore(v)
	if err != nil {
		s.fail(w, err)
		return nil, "", false
	}
	return st, nodeapi.VolumeName(v.ID), true
}

// readVolumeFiles returns a file's bytes, or a JSON listing for a
// directory, of a volume: no sandbox needs to run.
func (s *Server) readVolumeFiles(w http.ResponseWriter, r *http.Request) {
	p, name, st, ok := s.volumeFile(w, r)
	if !ok {
		return
	}
	body, info, err := st.ReadVolumeFile(r.Context(), name, p)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.serveVolumePath(w, r, info.GetPath(), body, info, func(opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
		return st.ListVolumeDir(r.Context(), name, p, opts)
	})
}

// writeVolumeFile streams the body into a file of a volume, durable
// before the answer; missing parent directories are made.
func (s *Server) writeVolumeFile(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > s.cfg.MaxFileBody {
		writeError(w, http.StatusRequestEntityTooLarge, "file larger than "+strconv.FormatInt(s.cfg.MaxFileBody, 10)+" bytes")
		return
	}
	if !s.cfg.Uploads.Admit(w, keyOf(r).ID) {
		return
	}
	defer s.cfg.Uploads.Leave(keyOf(r).ID)
	p, name, st, ok := s.volumeFile(w, r)
	if !ok {
		return
	}
	e, err := st.WriteVolumeFile(r.Context(), nodeapi.VolumeEdit{Volume: name, Path: p, Parents: true},
		http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBody))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entryView(e))
}

func (s *Server) removeVolumeFile(w http.ResponseWriter, r *http.Request) {
	p, name, st, ok := s.volumeFile(w, r)
	if !ok {
		return
	}
	if _, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: name, Path: p, Op: nodeapi.VolumeRemove}); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) mkdirVolume(w http.ResponseWriter, r *http.Request) {
	p, ok := s.mkdirPath(w, r)
	if !ok {
		return
	}
	st, name, ok := s.volumeStore(w, r)
	if !ok {
		return
	}
	e, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: name, Path: p, Op: nodeapi.VolumeMkdir, Parents: true})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryView(e))
}
