package api

import (
	"net/http"

	"github.com/space-platform/space/internal/hostpath"
)

// HidePaths wraps an API handler so that no error answer (status 400 and
// up) names a host directory of hide's: a wrapped error from storage, the
// runtime or a template build would otherwise tell a client where and how
// the host keeps its data. Success answers pass untouched: they carry the
// sandbox's own data (command output, files, env, metadata), and the
// errors they quote (a failed sandbox's reason, its events, build logs)
// are hidden where they are recorded.
func HidePaths(h http.Handler, hide *hostpath.Hider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&pathHider{ResponseWriter: w, hide: hide}, r)
	})
}

type pathHider struct {
	http.ResponseWriter
	hide    *hostpath.Hider
	decided bool
	rewrite bool
}

func (p *pathHider) WriteHeader(status int) {
	if !p.decided {
		p.decided = true
		p.rewrite = status >= 400
	}
	p.ResponseWriter.WriteHeader(status)
}

// Write rewrites error bodies; they are written in one piece
// (json.Encoder), so a path is not split between writes.
func (p *pathHider) Write(b []byte) (int, error) {
	if !p.decided {
		p.WriteHeader(http.StatusOK)
	}
	if !p.rewrite {
		return p.ResponseWriter.Write(b)
	}
	if _, err := p.ResponseWriter.Write(p.hide.Bytes(b)); err != nil {
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
