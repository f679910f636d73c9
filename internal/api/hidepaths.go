package api

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
)

// HidePaths wraps an API handler so that no error answer (status 400 and
// up) names a host path under one of dirs (the data directory, where
// volumes, images and runtime state live): a wrapped error from storage,
// the runtime or a template build would otherwise tell a client where and
// how the host keeps its data. Such paths become "<host>"; the server's log
// keeps the whole error. JSON success answers are rewritten too, because
// they carry errors as well (a failed sandbox's reason, its events, build
// logs), except the files routes, whose listings name the sandbox's own
// paths; file contents pass untouched.
func HidePaths(h http.Handler, dirs ...string) http.Handler {
	var olds [][]byte
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		olds = append(olds, []byte(filepath.Clean(d)))
		// The same directory through a symlink (/var/tmp → /private/...).
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			olds = append(olds, []byte(real))
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		files := strings.HasSuffix(r.URL.Path, "/files")
		h.ServeHTTP(&pathHider{ResponseWriter: w, olds: olds, files: files}, r)
	})
}

var hostPlaceholder = []byte("<host>")

type pathHider struct {
	http.ResponseWriter
	olds    [][]byte
	files   bool // a files route: only its errors are rewritten
	decided bool
	rewrite bool
}

func (p *pathHider) WriteHeader(status int) {
	if !p.decided {
		p.decided = true
		json := strings.HasPrefix(p.Header().Get("Content-Type"), "application/json")
		p.rewrite = status >= 400 || (json && !p.files)
	}
	p.ResponseWriter.WriteHeader(status)
}

// Write rewrites the chosen bodies; JSON answers are written in one piece
// (json.Encoder), so a path is not split between writes.
func (p *pathHider) Write(b []byte) (int, error) {
	if !p.decided {
		p.WriteHeader(http.StatusOK)
	}
	if !p.rewrite {
		return p.ResponseWriter.Write(b)
	}
	out := b
	for _, old := range p.olds {
		// ReplaceAll copies even when nothing matches; most answers
		// name no host path and pass as they are.
		if bytes.Contains(out, old) {
			out = bytes.ReplaceAll(out, old, hostPlaceholder)
		}
	}
	if _, err := p.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush and Unwrap keep streaming answers (attach, listings, logs) working
// through the wrapper.
func (p *pathHider) Flush() {
	if !p.decided {
		p.WriteHeader(http.StatusOK) // flushing sends the header
	}
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *pathHider) Unwrap() http.ResponseWriter { return p.ResponseWriter }
