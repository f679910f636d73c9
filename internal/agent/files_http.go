package agent

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// fileWriteInfo is one element of the POST /files response. Python SDK 2.21
// passes the keys as keyword arguments and knows only name, type and path,
// so metadata is present only when the file has some, which only a client
// that sent X-Metadata-* headers (e2b ≥ 2.45, envd ≥ 0.6.2) can cause.
type fileWriteInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// writtenFile answers for dst once written, with the metadata read back
// from the file, so the answer never claims pairs a filesystem without
// xattrs could not keep.
func writtenFile(dst string) fileWriteInfo {
	return fileWriteInfo{Name: filepath.Base(dst), Type: "file", Path: dst, Metadata: readMetadata(dst)}
}

// httpError carries the status an /files failure should produce.
type httpError struct {
	status int
	err    error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func newHTTPError(status int, format string, args ...any) error {
	return &httpError{status: status, err: fmt.Errorf(format, args...)}
}

// writeJSONError writes envd's error body {"code":<status>,"message":...}.
func writeJSONError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, err.Error()})
}

// writeHTTPError maps err to a status: an *httpError's own, else from the
// filesystem error kind.
func writeHTTPError(w http.ResponseWriter, err error) {
	var he *httpError
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &he):
		status = he.status
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		status = http.StatusInsufficientStorage
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		status = http.StatusForbidden
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		status = http.StatusBadRequest
	}
	writeJSONError(w, status, err)
}

// fileRequestUser authorizes a /files request and resolves its user (the
// username query parameter, else the default user).
func (a *Agent) fileRequestUser(r *http.Request, operation string) (*userAccount, error) {
	if err := a.authorizeFileRequest(r, operation); err != nil {
		return nil, &httpError{status: http.StatusUnauthorized, err: err}
	}
	name := r.URL.Query().Get("username")
	u, err := a.resolveUser(name, name != "")
	if err != nil {
		return nil, &httpError{status: http.StatusUnauthorized, err: err}
	}
	return u, nil
}

func (a *Agent) handleFileDownload(w http.ResponseWriter, r *http.Request) {
	u, err := a.fileRequestUser(r, signOpRead)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	path, err := resolvePath(r.URL.Query().Get("path"), u)
	if err != nil {
		writeHTTPError(w, &httpError{status: http.StatusBadRequest, err: err})
		return
	}
	var f *os.File
	err = asUser(u, func() (err error) {
		f, err = os.Open(path)
		return err
	})
	if err != nil {
		writeHTTPError(w, fmt.Errorf("open %s: %w", path, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeHTTPError(w, fmt.Errorf("stat %s: %w", path, err))
		return
	}
	if fi.IsDir() {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "path %s is a directory", path))
		return
	}

	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(path)}))
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		// Speed over ratio: this is on the path of every large download.
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if _, err := io.Copy(gz, f); err != nil {
			a.log.Warn("download interrupted", "path", path, "err", err)
			return
		}
		if err := gz.Close(); err != nil {
			a.log.Warn("download interrupted", "path", path, "err", err)
		}
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	if _, err := io.Copy(w, f); err != nil {
		a.log.Warn("download interrupted", "path", path, "err", err)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, enc := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(enc), ";")
			if strings.EqualFold(strings.TrimSpace(name), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
				return true
			}
		}
	}
	return false
}

func (a *Agent) handleFileUpload(w http.ResponseWriter, r *http.Request) {
	u, err := a.fileRequestUser(r, signOpWrite)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "invalid content type: %w", err))
		return
	}
	// Checked before any byte is written, so a refused set leaves no file.
	md, err := metadataFromHeaders(r.Header)
	if err != nil {
		writeHTTPError(w, &httpError{status: http.StatusBadRequest, err: err})
		return
	}
	up := upload{agent: a, user: u, metadata: md}
	var written []fileWriteInfo
	switch mediaType {
	case "multipart/form-data":
		written, err = up.multipart(r)
	case "application/octet-stream":
		written, err = up.raw(r)
	default:
		err = newHTTPError(http.StatusBadRequest, "unsupported content type %q", mediaType)
	}
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	if len(written) == 0 {
		writeHTTPError(w, newHTTPError(http.StatusBadRequest, "no file part named \"file\" in the request"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}

// upload is one POST /files request: who writes, and the metadata every
// file it writes gets (replacing what an overwritten file had).
type upload struct {
	agent    *Agent
	user     *userAccount
	metadata map[string]string
}

// raw writes an application/octet-stream body (optionally gzip encoded) to
// the path query parameter.
func (up upload) raw(r *http.Request) ([]fileWriteInfo, error) {
	u := up.user
	raw := r.URL.Query().Get("path")
	if raw == "" {
		return nil, newHTTPError(http.StatusBadRequest, "path query parameter is required for octet-stream uploads")
	}
	dst, err := resolvePath(raw, u)
	if err != nil {
		return nil, &httpError{status: http.StatusBadRequest, err: err}
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, newHTTPError(http.StatusBadRequest, "invalid gzip body: %w", err)
		}
		defer gz.Close()
		body = gz
	default:
		return nil, newHTTPError(http.StatusBadRequest, "unsupported content encoding %q", enc)
	}
	if err := up.write(dst, body); err != nil {
		return nil, err
	}
	return []fileWriteInfo{writtenFile(dst)}, nil
}

// multipart streams every part named "file" to disk. The destination is
// the path query parameter for the first part (single-file form) and each
// part's Content-Disposition filename otherwise; the filename is parsed
// directly because multipart.Part.FileName strips directories.
func (up upload) multipart(r *http.Request) ([]fileWriteInfo, error) {
	u := up.user
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, newHTTPError(http.StatusBadRequest, "invalid multipart body: %w", err)
	}
	queryPath := r.URL.Query().Get("path")
	var written []fileWriteInfo
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return nil, newHTTPError(http.StatusBadRequest, "read multipart body: %w", err)
		}
		if part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		target := queryPath
		if target == "" || len(written) > 0 {
			target = partFilename(part.Header.Get("Content-Disposition"))
		}
		if target == "" {
			_ = part.Close()
			return nil, newHTTPError(http.StatusBadRequest, "file part has no filename and no path query parameter was given")
		}
		dst, err := resolvePath(target, u)
		if err != nil {
			_ = part.Close()
			return nil, &httpError{status: http.StatusBadRequest, err: err}
		}
		err = up.write(dst, part)
		_ = part.Close()
		if err != nil {
			return nil, err
		}
		written = append(written, writtenFile(dst))
	}
}

// partFilename returns the raw filename parameter (RFC 2231 forms
// included), keeping directories.
func partFilename(contentDisposition string) string {
	_, params, err := mime.ParseMediaType(contentDisposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// write stores one file as the upload's user, with the upload's metadata.
// On a filesystem without xattrs (procfs, sysfs, some FUSE mounts) the data
// is kept and the metadata is not, as envd does; the answer, read back from
// the file, then shows none.
func (up upload) write(dst string, src io.Reader) error {
	err := asUser(up.user, func() error { return writeFileDurably(dst, src, up.user, up.metadata) })
	if errors.Is(err, errXattrUnsupported) {
		up.agent.log.Warn("file metadata not kept: the filesystem has no extended attributes", "path", dst)
		return nil
	}
	return err
}

// writeFileDurably streams src into dst (created or truncated, owned by u),
// creating parent directories, and makes md its whole metadata set. It
// returns only after the data, the metadata and the new directory entries
// are on disk: the file, its parent and every directory it created are
// fsynced, because the API acknowledges a write only once it is durable.
// errXattrUnsupported (wrapped) means all of that holds except the
// metadata.
func writeFileDurably(dst string, src io.Reader, u *userAccount, md map[string]string) error {
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		return newHTTPError(http.StatusBadRequest, "path %s is a directory", dst)
	}
	parent := filepath.Dir(dst)
	firstMissing := topmostMissingDir(parent)
	if err := mkdirAllOwned(parent, u); err != nil {
		return fmt.Errorf("create parent directories of %s: %w", dst, err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	if err := chownToUser(dst, u); err != nil {
		_ = f.Close()
		return err
	}
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(onlyWriter{f}, src, buf); err != nil {
		_ = f.Close()
		if isWriteError(err) {
			return fmt.Errorf("write %s: %w", dst, err) // ENOSPC becomes 507
		}
		return newHTTPError(http.StatusBadRequest, "read upload body for %s: %w", dst, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("fsync %s: %w", dst, err)
	}
	// Metadata only once the data is synced: gVisor may hold written pages
	// until fsync while xattrs reach the host at once, and a watcher reading
	// the entry in between was seen to get the new metadata on a file of
	// size 0. A changed set is synced in turn.
	changed, mdErr := replaceMetadata(f, md)
	if mdErr != nil && !errors.Is(mdErr, errXattrUnsupported) {
		_ = f.Close()
		return mdErr // ENOSPC or EDQUOT becomes 507
	}
	if changed {
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return fmt.Errorf("fsync metadata of %s: %w", dst, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", dst, err)
	}
	stop := parent
	if firstMissing != "" {
		stop = filepath.Dir(firstMissing)
	}
	if err := syncDirChain(parent, stop); err != nil {
		return err
	}
	return mdErr
}

// onlyWriter hides *os.File's ReadFrom so that io.CopyBuffer uses our
// buffer and write errors stay distinguishable from read errors.
type onlyWriter struct{ f *os.File }

type fileWriteError struct{ err error }

func (e *fileWriteError) Error() string { return e.err.Error() }
func (e *fileWriteError) Unwrap() error { return e.err }

func (w onlyWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = &fileWriteError{err}
	}
	return n, err
}

func isWriteError(err error) bool {
	var we *fileWriteError
	return errors.As(err, &we)
}

// topmostMissingDir returns the highest ancestor of dir (or dir itself)
// that does not exist yet, or "" if dir exists.
func topmostMissingDir(dir string) string {
	missing := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			return missing
		}
		missing = d
		if filepath.Dir(d) == d {
			return missing
		}
	}
}

// syncDirChain fsyncs dir and its ancestors up to and including stop.
func syncDirChain(dir, stop string) error {
	for d := dir; ; d = filepath.Dir(d) {
		if err := syncDir(d); err != nil {
			return err
		}
		if d == stop || filepath.Dir(d) == d {
			return nil
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		// EINVAL: the filesystem does not support fsync on directories.
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
