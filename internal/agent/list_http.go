package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/space-platform/space/internal/dirlist"
)

// handleList answers GET /list?path=&depth=&limit=&cursor= (a space
// extension, not part of envd): one page of a directory tree as JSON lines
// (see dirlist.Line), written while the directory is read so that neither
// the agent nor the node ever holds the whole listing. Order and cursor
// semantics are dirlist's.
func (a *Agent) handleList(w http.ResponseWriter, r *http.Request) {
	u, err := a.fileRequestUser(r, signOpRead)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	q := r.URL.Query()
	root, err := resolvePath(q.Get("path"), u)
	if err != nil {
		writeHTTPError(w, &httpError{status: http.StatusBadRequest, err: err})
		return
	}
	depth, err := boundedInt(q.Get("depth"), 1, dirlist.MaxDepth, 1)
	if err != nil {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "depth: %w", err))
		return
	}
	limit, err := boundedInt(q.Get("limit"), 1, dirlist.MaxLimit, dirlist.DefaultLimit)
	if err != nil {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "limit: %w", err))
		return
	}
	after, err := dirlist.DecodeCursor(q.Get("cursor"))
	if err != nil {
		writeHTTPError(w, &httpError{status: http.StatusBadRequest, err: err})
		return
	}
	fi, err := os.Stat(root)
	if err != nil {
		writeHTTPError(w, fmt.Errorf("list %s: %w", root, err))
		return
	}
	if !fi.IsDir() {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "list %s: not a directory", root))
		return
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(out)
	next, err := dirlist.Page(r.Context(), dirlist.Dir(root), depth, limit, after, func(rel string, fi fs.FileInfo) error {
		entry, err := protojson.Marshal(a.entryInfoFrom(filepath.Join(root, rel), fi))
		if err != nil {
			return err
		}
		return enc.Encode(dirlist.Line{Entry: entry})
	})
	last := dirlist.Line{Done: true, NextCursor: dirlist.EncodeCursor(next)}
	if err != nil {
		if errors.Is(err, r.Context().Err()) {
			return // the node went away
		}
		a.log.Warn("list interrupted", "path", root, "err", err)
		last = dirlist.Line{Error: err.Error()}
	}
	_ = enc.Encode(last)
	_ = out.Flush()
}

// boundedInt parses an optional integer query parameter in [lo, hi].
func boundedInt(v string, lo, hi, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("must be an integer between %d and %d, got %q", lo, hi, v)
	}
	return n, nil
}
