package api

import (
	"bytes"
	"net/http"
	"path/filepath"
)

// HidePaths wraps an API handler so that no error answer (status 400 and
// up) names a host path under one of dirs (the data directory, where
// volumes, images and runtime state live): a wrapped error from storage,
// the runtime or a template build would otherwise tell a client where and
// how the host keeps its data. Such paths become "<host>"; the server's log
// keeps the whole error. Success answers (file contents, listings) pass
// untouched.
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
		h.ServeHTTP(&pathHider{ResponseWriter: w, olds: olds}, r)
	})
}

type pathHider struct {
	http.ResponseWriter
	olds  [][]byte
	error bool
}

func (p *pathHider) WriteHeader(status int) {
	p.error = status >= 400
	p.ResponseWriter.WriteHeader(status)
}

// Write rewrites error bodies; they are small JSON objects written at once.
func (p *pathHider) Write(b []byte) (int, error) {
	if !p.error {
		return p.ResponseWriter.Write(b)
	}
	out := b
	for _, old := range p.olds {
		out = bytes.ReplaceAll(out, old, []byte("<host>"))
	}
	if _, err := p.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush and Unwrap keep streaming answers (attach, listings, logs) working
// through the wrapper.
func (p *pathHider) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *pathHider) Unwrap() http.ResponseWriter { return p.ResponseWriter }
