package credentials

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strings"
)

// Redacted replaces a secret in everything the sandbox reads.
const Redacted = "[REDACTED]"

// redactor removes secrets from text. It looks for each value verbatim and
// in the forms an upstream most often reflects it: JSON string escaping
// (with and without HTML escaping) and URL escaping.
type redactor struct {
	patterns [][]byte // longest first, so a longer form wins a tie
	longest  int
}

func newRedactor(values []string) *redactor {
	seen := map[string]bool{}
	r := &redactor{}
	add := func(p string) {
		if p == "" || seen[p] {
			return
		}
		seen[p] = true
		r.patterns = append(r.patterns, []byte(p))
		r.longest = max(r.longest, len(p))
	}
	for _, v := range values {
		add(v)
		add(jsonEscaped(v, true))
		add(jsonEscaped(v, false))
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
	}
	sort.SliceStable(r.patterns, func(i, j int) bool { return len(r.patterns[i]) > len(r.patterns[j]) })
	return r
}

// jsonEscaped is v as it appears inside a JSON string.
func jsonEscaped(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	s := strings.TrimSuffix(b.String(), "\n")
	return strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`)
}

// String redacts a complete string (a header value, an error message).
func (r *redactor) String(s string) string {
	if len(r.patterns) == 0 {
		return s
	}
	out, rest := r.replace([]byte(s))
	return string(append(out, rest...))
}

// replace redacts every complete occurrence in buf; rest is the tail after
// the last one (unredacted, and possibly the start of an occurrence).
func (r *redactor) replace(buf []byte) (out, rest []byte) {
	i := 0
	for i < len(buf) {
		at, n := -1, 0
		for _, p := range r.patterns {
			if j := bytes.Index(buf[i:], p); j >= 0 && (at < 0 || j < at) {
				at, n = j, len(p)
			}
		}
		if at < 0 {
			break
		}
		out = append(out, buf[i:i+at]...)
		out = append(out, Redacted...)
		i += at + n
	}
	return out, buf[i:]
}

// held is how many bytes at the end of tail could begin an occurrence, and
// so must wait for the next read.
func (r *redactor) held(tail []byte) int {
	hold := 0
	from := max(0, len(tail)-(r.longest-1))
	for _, p := range r.patterns {
		for j := from; j < len(tail); j++ {
			k := bytes.IndexByte(tail[j:], p[0])
			if k < 0 {
				break
			}
			j += k
			if n := len(tail) - j; n < len(p) && bytes.HasPrefix(p, tail[j:]) {
				hold = max(hold, n)
				break // the earliest such start holds the most
			}
		}
	}
	return hold
}

// redactingWriter streams redacted bytes to w. A secret split across
// writes is still caught: bytes that could begin one are held back until
// the next write or Close shows what follows.
type redactingWriter struct {
	r     *redactor
	w     io.Writer
	flush func()
	buf   []byte
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	if len(rw.r.patterns) == 0 {
		return rw.emit(p, len(p))
	}
	rw.buf = append(rw.buf, p...)
	out, rest := rw.r.replace(rw.buf)
	hold := rw.r.held(rest)
	out = append(out, rest[:len(rest)-hold]...)
	rw.buf = append(rw.buf[:0], rest[len(rest)-hold:]...)
	return rw.emit(out, len(p))
}

func (rw *redactingWriter) emit(out []byte, n int) (int, error) {
	if len(out) > 0 {
		if _, err := rw.w.Write(out); err != nil {
			return 0, err
		}
		if rw.flush != nil {
			rw.flush()
		}
	}
	return n, nil
}

// Close writes what was held back: at the end of the stream it cannot be
// the start of a secret any more.
func (rw *redactingWriter) Close() error {
	_, err := rw.emit(rw.buf, 0)
	rw.buf = nil
	return err
}
