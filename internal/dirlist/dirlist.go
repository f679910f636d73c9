// Package dirlist lists a directory tree one page at a time while holding
// only a bounded number of names in memory, so that a directory of hundreds
// of thousands of entries can be listed by a small process.
//
// Order: entries come in pre-order (a directory, then its subtree), and the
// children of each directory in byte-wise order of their names. The order
// does not depend on the directory's on-disk layout, so a cursor (the path
// of the last entry returned) stays valid while entries are added and
// removed: every entry that exists during the whole listing is returned
// exactly once, entries created or removed meanwhile may or may not be.
//
// Cost: each page reads every directory on its path in full (64 KiB
// getdents reads) and keeps at most 2*(limit+1) names of one directory, or
// 2*dirBatch per directory level for deep listings.
package dirlist

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// FS opens directories and describes entries by paths relative to the
// listed root ("." is the root). *os.Root satisfies it.
type FS interface {
	Open(name string) (*os.File, error)
	Lstat(name string) (fs.FileInfo, error)
}

// Dir is an FS rooted at an absolute host (or sandbox) path. Unlike
// os.Root it follows symlinks in the root path, as a shell would; use it
// only where the caller may see the whole filesystem anyway.
type Dir string

func (d Dir) Open(name string) (*os.File, error)     { return os.Open(path.Join(string(d), name)) }
func (d Dir) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(path.Join(string(d), name)) }

// dirBatch bounds how many names of one directory a deep listing holds at
// a time: a directory further down the tree needs its own batch while the
// parent's is still held.
const dirBatch = 1024

// EncodeCursor makes a cursor, opaque to clients, from the relative path
// of the last entry of a page.
func EncodeCursor(rel string) string {
	if rel == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(rel))
}

// ErrBadCursor is returned for a cursor that no listing produced.
var ErrBadCursor = errors.New("invalid cursor")

// DecodeCursor undoes EncodeCursor ("" is the first page).
func DecodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	rel := string(b)
	if err != nil || rel == "" || strings.ContainsRune(rel, 0) || path.IsAbs(rel) || path.Clean(rel) != rel ||
		rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: use the next_cursor of the previous page", ErrBadCursor)
	}
	return rel, nil
}

// Visit receives one entry: its path relative to the root and its lstat.
type Visit func(rel string, fi fs.FileInfo) error

// Page visits at most limit entries of the tree below the root of fsys, to
// depth levels (1 = the root's children), starting after the entry whose
// relative path is after ("" for the first page). It returns the relative
// path to resume after, or "" when the tree holds nothing more.
func Page(ctx context.Context, fsys FS, depth, limit int, after string, visit Visit) (string, error) {
	if depth < 1 || limit < 1 {
		return "", fmt.Errorf("list: depth and limit must be positive")
	}
	w := &walker{ctx: ctx, fsys: fsys, depth: depth, limit: limit, visit: visit}
	var resume []string
	if after != "" {
		resume = strings.Split(after, "/")
	}
	if _, err := w.walk(".", 1, resume); err != nil {
		return "", err
	}
	if !w.more {
		return "", nil
	}
	return w.last, nil
}

type walker struct {
	ctx          context.Context
	fsys         FS
	depth, limit int
	visit        Visit
	emitted      int
	last         string
	more         bool
}

// walk lists directory rel (its children are at level), resuming after
// the path components in resume. It reports stop once the page is full.
func (w *walker) walk(rel string, level int, resume []string) (stop bool, err error) {
	if err := w.ctx.Err(); err != nil {
		return true, err
	}
	f, err := w.fsys.Open(rel)
	if err != nil {
		if rel != "." && errors.Is(err, fs.ErrNotExist) {
			return false, nil // removed while listing
		}
		return true, fmt.Errorf("open %s: %w", rel, err)
	}
	defer f.Close()
	start := ""
	if len(resume) > 0 {
		start = resume[0]
		// The cursor's own entry was returned; its subtree comes next.
		if level < w.depth {
			child := join(rel, start)
			if fi, err := w.fsys.Lstat(child); err == nil && fi.IsDir() {
				if stop, err := w.walk(child, level+1, resume[1:]); stop || err != nil {
					return true, err
				}
			}
		}
	}
	for {
		n := w.limit - w.emitted + 1 // one more tells whether a next page exists
		if level < w.depth {
			n = min(n, dirBatch)
		}
		names, more, err := smallestAfter(f, start, n)
		if err != nil {
			return true, fmt.Errorf("read %s: %w", rel, err)
		}
		for _, name := range names {
			child := join(rel, name)
			fi, err := w.fsys.Lstat(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while listing
			}
			if err != nil {
				return true, fmt.Errorf("stat %s: %w", child, err)
			}
			if w.emitted == w.limit {
				w.more = true
				return true, nil
			}
			if err := w.visit(child, fi); err != nil {
				return true, err
			}
			w.emitted++
			w.last = child
			if level < w.depth && fi.IsDir() {
				if stop, err := w.walk(child, level+1, nil); stop || err != nil {
					return true, err
				}
			}
		}
		if !more {
			return false, nil
		}
		start = names[len(names)-1]
	}
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// smallestAfter reads directory f from its start and returns, sorted, the
// n smallest names greater than after, and whether there are more. It
// holds at most 2n names and one getdents buffer.
func smallestAfter(f *os.File, after string, n int) ([]string, bool, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, false, err
	}
	cand := make([]string, 0, 2*n) // never grows: trimmed to n when full
	bound, bounded, more := "", false, false
	err := readNames(f, func(name string) {
		if name <= after {
			return
		}
		if bounded && name >= bound {
			more = true
			return
		}
		cand = append(cand, name)
		if len(cand) >= 2*n {
			slices.Sort(cand)
			// Keep the n smallest in the same array: its size stays 2n.
			cand = cand[:n]
			bound, bounded, more = cand[n-1], true, true
		}
	})
	if err != nil {
		return nil, false, err
	}
	slices.Sort(cand)
	if len(cand) > n {
		cand, more = cand[:n], true
	}
	return cand, more, nil
}

// direntBuf is the getdents buffer: large, because a page reads the whole
// directory and each system call is dear under gVisor (os.File.Readdirnames
// uses 8 KiB).
const direntBuf = 64 << 10

// readNames calls each with every name of directory f from its current
// offset, except "." and "..".
func readNames(f *os.File, each func(string)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, direntBuf)
	names := make([]string, 0, 512)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.ReadDirent(int(fd), buf)
			return rerr != syscall.EAGAIN
		}); err != nil {
			return err
		}
		if rerr == syscall.EINTR {
			continue
		}
		if rerr != nil {
			return rerr
		}
		if n <= 0 {
			return nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			each(name)
		}
	}
}
