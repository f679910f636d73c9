package api

import (
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/pkg/apiv1"
)

// filePath reads and checks the path query parameter.
func filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	switch {
	case p == "":
		writeError(w, http.StatusBadRequest, "the path query parameter is required")
		return "", false
	case strings.ContainsRune(p, 0):
		writeError(w, http.StatusBadRequest, "path must not contain NUL bytes")
		return "", false
	case len(p) > 4096:
		writeError(w, http.StatusBadRequest, "path longer than 4096 bytes")
		return "", false
	}
	return p, true
}

func entryView(e *filesystempb.EntryInfo) apiv1.FileEntry {
	kind := "file"
	switch {
	case e.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY:
		kind = "dir"
	case e.SymlinkTarget != nil && e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY:
		kind = "symlink"
	}
	var mod time.Time
	if t := e.GetModifiedTime(); t != nil {
		mod = t.AsTime()
	}
	return apiv1.FileEntry{
		Name: e.GetName(), Path: e.GetPath(), Type: kind, Size: e.GetSize(), Mode: e.GetMode(),
		Owner: e.GetOwner(), Group: e.GetGroup(), ModifiedAt: mod, SymlinkTarget: e.GetSymlinkTarget(),
	}
}

// readFiles returns a file's bytes, or a JSON listing for a directory.
func (s *Server) readFiles(w http.ResponseWriter, r *http.Request) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	if snap := r.URL.Query().Get("snapshot"); snap != "" {
		s.readSnapshotFile(w, r, snap, p)
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	user := r.URL.Query().Get("user")
	info, err := sb.Stat(r.Context(), p, user)
	if err != nil {
		s.fail(w, err)
		return
	}
	if info.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
		depth := uint32(1)
		if v := r.URL.Query().Get("depth"); v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n < 1 || n > 64 {
				writeError(w, http.StatusBadRequest, "depth must be an integer between 1 and 64")
				return
			}
			depth = uint32(n)
		}
		entries, err := sb.ListDir(r.Context(), p, user, depth)
		if err != nil {
			s.fail(w, err)
			return
		}
		out := apiv1.FileList{Path: info.GetPath(), Entries: []apiv1.FileEntry{}}
		for _, e := range entries {
			out.Entries = append(out.Entries, entryView(e))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	body, size, err := sb.ReadFile(r.Context(), p, user)
	if err != nil {
		s.fail(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, body)
}

// writeFile streams the body into a file; it answers only once the agent
// has synced it to disk.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	if r.ContentLength > s.cfg.MaxFileBody {
		writeError(w, http.StatusRequestEntityTooLarge, "file larger than "+strconv.FormatInt(s.cfg.MaxFileBody, 10)+" bytes")
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	user := r.URL.Query().Get("user")
	if err := sb.WriteFile(r.Context(), p, user, http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBody)); err != nil {
		s.fail(w, err)
		return
	}
	info, err := sb.Stat(r.Context(), p, user)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entryView(info))
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := sb.Remove(r.Context(), p, r.URL.Query().Get("user")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req apiv1.MkdirRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.Path == "" {
		writeError(w, http.StatusBadRequest, "path is required")
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	info, err := sb.MakeDir(r.Context(), req.Path, r.URL.Query().Get("user"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryView(info))
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	var req apiv1.MoveRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.From == "" || req.To == "" {
		writeError(w, http.StatusBadRequest, "from and to are required")
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	info, err := sb.Move(r.Context(), req.From, req.To, r.URL.Query().Get("user"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entryView(info))
}

// readSnapshotFile serves a file, or lists a directory, from a snapshot's
// filesystem: an agent can recover one earlier file without a rollback.
func (s *Server) readSnapshotFile(w http.ResponseWriter, r *http.Request, snap, p string) {
	f, info, err := s.cp.OpenSnapshotFile(r.PathValue("id"), snap, p)
	if err != nil {
		s.fail(w, err)
		return
	}
	defer f.Close()
	if info.IsDir() {
		entries, err := f.ReadDir(-1)
		if err != nil {
			s.fail(w, err)
			return
		}
		out := apiv1.FileList{Path: p, Entries: []apiv1.FileEntry{}}
		for _, e := range entries {
			ei, err := e.Info()
			if err != nil {
				continue
			}
			kind := "file"
			switch {
			case ei.IsDir():
				kind = "dir"
			case ei.Mode()&os.ModeSymlink != 0:
				kind = "symlink"
			}
			out.Entries = append(out.Entries, apiv1.FileEntry{
				Name: e.Name(), Path: path.Join(p, e.Name()), Type: kind, Size: ei.Size(),
				Mode: uint32(ei.Mode().Perm()), ModifiedAt: ei.ModTime().UTC(),
			})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if !info.Mode().IsRegular() {
		writeError(w, http.StatusBadRequest, p+" in the snapshot is not a regular file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}
