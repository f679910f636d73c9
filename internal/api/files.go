package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/dirlist"
	"github.com/space-platform/space/internal/nodeapi"
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
	case e.GetType() == filesystempb.FileType_FILE_TYPE_SYMLINK:
		// A snapshot's listing (the agent describes a symlink by its
		// target's type and sets SymlinkTarget).
		kind = "symlink"
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
		Metadata: e.GetMetadata(),
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
		opts, ok := listOptions(w, r)
		if !ok {
			return
		}
		page, err := sb.List(r.Context(), p, user, opts)
		if err != nil {
			s.fail(w, err)
			return
		}
		defer page.Close()
		s.streamListing(w, info.GetPath(), pageEntries(page))
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
	if !s.cfg.Uploads.Admit(w, keyOf(r).ID) {
		return
	}
	defer s.cfg.Uploads.Leave(keyOf(r).ID)
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

// mkdirPath reads the body of a mkdir route: its path, which is required.
func (s *Server) mkdirPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req apiv1.MkdirRequest
	if !s.readJSON(w, r, &req) {
		return "", false
	}
	if req.Path == "" {
		writeError(w, http.StatusBadRequest, "path is required")
		return "", false
	}
	return req.Path, true
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	p, ok := s.mkdirPath(w, r)
	if !ok {
		return
	}
	sb, err := s.cp.Running(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	info, err := sb.MakeDir(r.Context(), p, r.URL.Query().Get("user"))
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
	body, info, err := s.cp.ReadSnapshotFile(r.Context(), r.PathValue("id"), snap, p)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.serveVolumePath(w, r, p, body, info, func(opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
		if opts.Depth > 1 {
			return nil, &nodeapi.AgentError{Status: http.StatusBadRequest, Message: "snapshot listings have depth 1"}
		}
		return s.cp.ListSnapshotDir(r.Context(), r.PathValue("id"), snap, p, opts)
	})
}

// serveVolumePath answers a read of a path of a volume (a snapshot's
// filesystem or a persistent volume) that the node opened: a file's bytes,
// or for a directory the page list gives.
func (s *Server) serveVolumePath(w http.ResponseWriter, r *http.Request, p string, body io.ReadCloser, info *filesystempb.EntryInfo, list func(nodeapi.ListOptions) (nodeapi.DirPage, error)) {
	defer body.Close()
	if info.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
		opts, ok := listOptions(w, r)
		if !ok {
			return
		}
		page, err := list(opts)
		if err != nil {
			s.fail(w, err)
			return
		}
		defer page.Close()
		s.streamListing(w, p, pageEntries(page))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.GetSize(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, body)
}

// pageEntries emits the entries of page for streamListing.
func pageEntries(page nodeapi.DirPage) func(emit func(apiv1.FileEntry)) (string, error) {
	return func(emit func(apiv1.FileEntry)) (string, error) {
		for {
			e, err := page.Next()
			if errors.Is(err, io.EOF) {
				return page.NextCursor(), nil
			}
			if err != nil {
				return "", err
			}
			emit(entryView(e))
		}
	}
}

// listOptions reads depth, limit and cursor of a directory listing.
func listOptions(w http.ResponseWriter, r *http.Request) (nodeapi.ListOptions, bool) {
	q := r.URL.Query()
	var opts nodeapi.ListOptions
	for _, p := range []struct {
		name string
		max  int
		dst  *int
	}{{"depth", dirlist.MaxDepth, &opts.Depth}, {"limit", dirlist.MaxLimit, &opts.Limit}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > p.max {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be an integer between 1 and %d", p.name, p.max))
			return opts, false
		}
		*p.dst = n
	}
	opts.Cursor = q.Get("cursor")
	if _, err := dirlist.DecodeCursor(opts.Cursor); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return opts, false
	}
	return opts, true
}

// streamListing writes a FileList while list emits its entries (list
// returns the next page's cursor after the last), so that no layer holds a
// whole page. The status is decided by the first entry: a failure before it
// is answered as usual, one after it cuts the connection, so that a client
// never takes a broken answer for a complete (if short) page.
func (s *Server) streamListing(w http.ResponseWriter, dir string, list func(emit func(apiv1.FileEntry)) (string, error)) {
	var bw *bufio.Writer
	var enc *json.Encoder
	start := func() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		bw = bufio.NewWriterSize(w, 32<<10)
		enc = json.NewEncoder(bw)
		head, _ := json.Marshal(dir)
		fmt.Fprintf(bw, `{"path":%s,"entries":[`, head)
	}
	cursor, err := list(func(e apiv1.FileEntry) {
		if bw == nil {
			start()
		} else {
			bw.WriteString(",")
		}
		if enc.Encode(e) != nil {
			panic(http.ErrAbortHandler) // the client is gone
		}
	})
	switch {
	case err != nil && bw == nil:
		s.fail(w, err)
		return
	case err != nil:
		s.log.Warn("directory listing broke off", "path", dir, "err", err)
		_ = bw.Flush()
		panic(http.ErrAbortHandler)
	case bw == nil:
		start()
	}
	bw.WriteString("]")
	if cursor != "" {
		tail, _ := json.Marshal(cursor)
		fmt.Fprintf(bw, `,"next_cursor":%s`, tail)
	}
	bw.WriteString("}\n")
	_ = bw.Flush()
}
