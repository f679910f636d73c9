package api

import (
	"io"
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
//
// What the client sent comes back as sent: a path of its own under the
// data dir (a file in its sandbox) is not rewritten, or rewriting it would
// tell the client where the data dir is (hostpath.BytesKeeping).
func HidePaths(h http.Handler, hide *hostpath.Hider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := &pathHider{ResponseWriter: w, hide: hide, request: r}
		if r.Body != nil && r.Body != http.NoBody {
			p.body = &bodyHead{ReadCloser: r.Body}
			r.Body = p.body
		}
		h.ServeHTTP(p, r)
	})
}

type pathHider struct {
	http.ResponseWriter
	hide    *hostpath.Hider
	request *http.Request
	body    *bodyHead // nil without a body
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
	if _, err := p.ResponseWriter.Write(p.hide.BytesKeeping(b, p.clientInput()...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// clientInput is what the client sent that an error may quote: the URL's
// path and query values, and the start of the body.
func (p *pathHider) clientInput() [][]byte {
	in := [][]byte{[]byte(p.request.URL.Path)}
	for _, vs := range p.request.URL.Query() {
		for _, v := range vs {
			in = append(in, []byte(v))
		}
	}
	if p.body != nil {
		in = append(in, p.body.head)
	}
	return in
}

// maxBodyHead bounds how much of a request body is kept for clientInput:
// JSON requests, whose strings errors quote, are far smaller; an upload's
// content is not quoted.
const maxBodyHead = 64 << 10

// bodyHead keeps the first maxBodyHead bytes read from a request body.
type bodyHead struct {
	io.ReadCloser
	head []byte
}

func (b *bodyHead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if room := maxBodyHead - len(b.head); room > 0 && n > 0 {
		b.head = append(b.head, p[:min(n, room)]...)
	}
	return n, err
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
