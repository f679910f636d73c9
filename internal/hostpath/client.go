package hostpath

import (
	"bytes"
	"encoding/json"
	"path"
)

// BytesKeeping is Bytes, except that the client's own paths come back as
// the client sent them. A client that sends a path under the data dir
// (a file in its sandbox, a recipe's path) and finds it rewritten in the
// error has learnt where the data dir is; so every whole path in b that
// the client sent (or that cleaning a path it sent gives) is left alone,
// and only the host's own paths are rewritten. input is what the client
// sent: its URL path, query values, and body (a JSON body's strings are
// read decoded, whatever their escapes).
func (h *Hider) BytesKeeping(b []byte, input ...[]byte) []byte {
	if h == nil || !h.names(b) {
		return b
	}
	keep := h.clientPaths(input)
	if len(keep) == 0 {
		return h.Bytes(b)
	}
	var out []byte
	rest := b
	for len(rest) > 0 {
		start, end := nextKept(rest, keep)
		if start < 0 {
			break
		}
		out = append(out, h.Bytes(rest[:start])...)
		out = append(out, rest[start:end]...)
		rest = rest[end:]
	}
	return append(out, h.Bytes(rest)...)
}

// names reports whether b holds one of the host directories.
func (h *Hider) names(b []byte) bool {
	for _, dir := range h.dirs {
		if bytes.Contains(b, dir) {
			return true
		}
	}
	return false
}

// clientPaths are the tokens of input (and their cleaned forms) that name
// a host directory.
func (h *Hider) clientPaths(input [][]byte) map[string]bool {
	keep := map[string]bool{}
	add := func(text []byte) {
		if !h.names(text) && !h.names([]byte(path.Clean(string(text)))) {
			return
		}
		for _, tok := range tokens(text) {
			for _, p := range []string{string(tok), path.Clean(string(tok))} {
				if h.names([]byte(p)) {
					keep[p] = true
				}
			}
		}
	}
	for _, in := range input {
		add(in)
		if json.Valid(in) {
			var v any
			if json.Unmarshal(in, &v) == nil {
				walkStrings(v, func(s string) { add([]byte(s)) })
			}
		}
	}
	return keep
}

// nextKept finds the first whole token of b that is one of keep: its
// start and end, or -1.
func nextKept(b []byte, keep map[string]bool) (start, end int) {
	for i := 0; i < len(b); {
		if isDelimiter(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && !isDelimiter(b[j]) {
			j++
		}
		if keep[string(b[i:j])] {
			return i, j
		}
		i = j
	}
	return -1, -1
}

// tokens splits b at delimiters.
func tokens(b []byte) [][]byte {
	return bytes.FieldsFunc(b, func(r rune) bool { return r < 0x80 && isDelimiter(byte(r)) })
}

// isDelimiter reports whether c ends a path as error messages and JSON
// quote it: blanks and control characters, quotes and the punctuation
// around a path in a message or URL. A path containing one is kept or
// rewritten piece by piece, the same way in input and answer.
func isDelimiter(c byte) bool {
	if c <= ' ' || c == 0x7f {
		return true
	}
	switch c {
	case '"', '\'', '`', ':', ',', ';', '(', ')', '[', ']', '{', '}', '<', '>', '&', '?', '#', '=', '\\', '|':
		return true
	}
	return false
}

// walkStrings calls f with every string in a decoded JSON value, keys
// included.
func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []any:
		for _, e := range v {
			walkStrings(e, f)
		}
	case map[string]any:
		for k, e := range v {
			f(k)
			walkStrings(e, f)
		}
	}
}
