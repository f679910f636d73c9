// Package hostpath keeps the host's own directories out of what clients
// read: an error from storage, the runtime or a build names the paths
// where the host keeps its data, which tells a client where and how the
// host is laid out. A Hider replaces each such path's directory prefix
// with "<host>"; the server's log keeps the whole error.
package hostpath

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
)

// Placeholder stands where a host directory was.
const Placeholder = "<host>"

// Hider rewrites the directories it was made with. A nil Hider rewrites
// nothing.
type Hider struct {
	dirs [][]byte
}

// New returns a Hider for dirs (empty ones are skipped), each also under
// the name it resolves to through symlinks.
func New(dirs ...string) *Hider {
	h := &Hider{}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		d = filepath.Clean(d)
		h.dirs = append(h.dirs, []byte(d))
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			h.dirs = append(h.dirs, []byte(real))
		}
	}
	return h
}

// Bytes returns b with every host directory replaced; b itself when none
// occurs. A directory counts only as a whole path component: /data/space
// does not match in /data/spacex.
func (h *Hider) Bytes(b []byte) []byte {
	if h == nil {
		return b
	}
	for _, dir := range h.dirs {
		b = replaceDir(b, dir)
	}
	return b
}

// String is Bytes for a string.
func (h *Hider) String(s string) string {
	if h == nil {
		return s
	}
	return string(h.Bytes([]byte(s)))
}

func replaceDir(b, dir []byte) []byte {
	if !bytes.Contains(b, dir) {
		return b
	}
	var out []byte
	rest := b
	for {
		i := bytes.Index(rest, dir)
		if i < 0 {
			break
		}
		end := i + len(dir)
		if end < len(rest) && !endsComponent(rest[end]) {
			out = append(out, rest[:end]...)
			rest = rest[end:]
			continue
		}
		out = append(out, rest[:i]...)
		out = append(out, Placeholder...)
		rest = rest[end:]
	}
	return append(out, rest...)
}

// endsComponent reports whether c can follow a directory's last
// component: a separator or anything a name does not continue with.
func endsComponent(c byte) bool {
	switch {
	case c == '/':
		return true
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		return false
	}
	return true
}

// Pathless drops the host path a *fs.PathError, or a *net.OpError on a
// unix socket, carries, keeping what went wrong: the caller's message
// names the thing (a sandbox, a namespace) instead. Other errors are
// returned as they are.
func Pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && strings.HasPrefix(oe.Net, "unix") {
		return oe.Err
	}
	return err
}
