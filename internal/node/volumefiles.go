package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/dirlist"
	"github.com/space-platform/space/internal/nodeapi"
)

// The files of a captured volume (a snapshot's filesystem) are read on
// the node, so that the control plane recovers one earlier file without a
// restore and without ever seeing where the node keeps the volume. Every
// lookup goes through an os.Root of the volume: neither ".." nor a symlink
// the sandbox planted leads outside it. A volume holding a microVM's root
// image is read inside the image (imagefiles.go), behind the same calls.

// ReadVolumeFile opens an absolute path, as the sandbox saw it, inside a
// captured volume: a regular file's bytes, or a directory's entry alone.
func (n *Node) ReadVolumeFile(ctx context.Context, volume, p string) (io.ReadCloser, *filesystempb.EntryInfo, error) {
	root, rel, err := n.volumeRoot(volume, p)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	if img, ok := n.volumeImage(volume, root); ok {
		return n.readImageFile(ctx, img, volume, p)
	}
	// Stat before opening: opening a FIFO the sandbox left would block
	// until someone writes to it.
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, nil, volumeLookupError(volume, p, err)
	}
	entry := volumeEntry(path.Clean(p), fi)
	switch {
	case fi.IsDir():
		return http.NoBody, entry, nil
	case !fi.Mode().IsRegular():
		return nil, nil, &AgentError{Status: http.StatusBadRequest, Message: p + " in the " + volumeKind(volume) + " is not a regular file"}
	}
	f, err := root.Open(rel)
	if err != nil {
		return nil, nil, volumeLookupError(volume, p, err)
	}
	return f, entry, nil
}

// ListVolumeDir starts one page of a listing of a directory inside a
// captured volume. It returns once the first entry (or the end) is known,
// so that a failure of the listing itself comes back here, as it does
// from a remote node.
func (n *Node) ListVolumeDir(ctx context.Context, volume, p string, opts ListOptions) (nodeapi.DirPage, error) {
	after, err := dirlist.DecodeCursor(opts.Cursor)
	if err != nil {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: err.Error()}
	}
	depth, limit := opts.Depth, opts.Limit
	if depth == 0 {
		depth = 1
	}
	if limit == 0 {
		limit = dirlist.DefaultLimit
	}
	if depth < 1 || depth > dirlist.MaxDepth || limit < 1 || limit > dirlist.MaxLimit {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("depth must be between 1 and %d, limit between 1 and %d", dirlist.MaxDepth, dirlist.MaxLimit)}
	}
	root, rel, err := n.volumeRoot(volume, p)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if img, ok := n.volumeImage(volume, root); ok {
		return n.listImageDir(ctx, img, volume, p, depth, limit, after)
	}
	dir, err := root.OpenRoot(rel)
	if err != nil {
		return nil, volumeLookupError(volume, p, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	page := &volumePage{entries: make(chan *filesystempb.EntryInfo), cancel: cancel, dir: dir, path: p, kind: volumeKind(volume), log: n.log}
	go page.walk(ctx, depth, limit, after)
	first, err := page.Next()
	if err != nil && !errors.Is(err, io.EOF) {
		_ = page.Close()
		return nil, err
	}
	page.first, page.peeked = first, true
	return page, nil
}

// volumePage is one page of a volume directory's listing: dirlist walks
// it in a goroutine and hands over one entry at a time, so no more than
// the walk's own bounded state is held.
type volumePage struct {
	entries chan *filesystempb.EntryInfo
	cancel  context.CancelFunc
	dir     *os.Root
	path    string
	kind    string // "snapshot" or "volume", for messages
	log     *slog.Logger
	// Set by walk before it closes entries.
	next string
	err  error

	first     *filesystempb.EntryInfo
	peeked    bool
	closeOnce sync.Once
}

func (pg *volumePage) walk(ctx context.Context, depth, limit int, after string) {
	defer close(pg.entries)
	pg.next, pg.err = dirlist.Page(ctx, pg.dir, depth, limit, after, func(rel string, fi fs.FileInfo) error {
		select {
		case pg.entries <- volumeEntry(path.Join(pg.path, rel), fi):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// Next returns the next entry, or io.EOF after the last one.
func (pg *volumePage) Next() (*filesystempb.EntryInfo, error) {
	if pg.peeked {
		pg.peeked = false
		if pg.first != nil {
			return pg.first, nil
		}
		return nil, io.EOF
	}
	if e, ok := <-pg.entries; ok {
		return e, nil
	}
	if pg.err != nil {
		if errors.Is(pg.err, context.Canceled) || errors.Is(pg.err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("list %s in %s: %w", pg.path, pg.kind, pg.err)
		}
		// dirlist's errors name entries by their place in the volume;
		// the log keeps them, the answer says only what failed.
		pg.log.Warn("list directory of a "+pg.kind, "path", pg.path, "err", pg.err)
		return nil, fmt.Errorf("list %s in %s: reading the directory failed", pg.path, pg.kind)
	}
	return nil, io.EOF
}

// NextCursor is the cursor of the following page; valid after io.EOF.
func (pg *volumePage) NextCursor() string { return dirlist.EncodeCursor(pg.next) }

// Close stops the walk and releases the directory.
func (pg *volumePage) Close() error {
	pg.closeOnce.Do(func() {
		pg.cancel()
		for range pg.entries { // let the walk see the cancel and end
		}
		_ = pg.dir.Close()
	})
	return nil
}

// volumeEntry describes an entry of a volume at p, its path as the
// sandbox saw it. fi is an lstat for listings, so a symlink is one.
func volumeEntry(p string, fi fs.FileInfo) *filesystempb.EntryInfo {
	kind := filesystempb.FileType_FILE_TYPE_FILE
	switch {
	case fi.IsDir():
		kind = filesystempb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode()&os.ModeSymlink != 0:
		kind = filesystempb.FileType_FILE_TYPE_SYMLINK
	}
	e := &filesystempb.EntryInfo{
		Name: path.Base(p), Path: p, Type: kind, Size: fi.Size(),
		Mode: uint32(fi.Mode().Perm()), ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	fillOwner(e, fi)
	return e
}

// volumeRoot opens a captured volume as an os.Root and turns p, an
// absolute path inside the sandbox, into a path relative to it.
func (n *Node) volumeRoot(volume, p string) (*os.Root, string, error) {
	if err := nodeapi.ValidName(volume); err != nil {
		return nil, "", err
	}
	if !path.IsAbs(p) {
		return nil, "", &AgentError{Status: http.StatusBadRequest, Message: "paths in a snapshot must be absolute: " + p}
	}
	if !n.cfg.Volumes.Exists(volume) {
		return nil, "", &AgentError{Status: http.StatusNotFound, Message: volumeKind(volume) + " filesystem is gone"}
	}
	root, err := os.OpenRoot(n.cfg.Volumes.Path(volume))
	if err != nil {
		// The volume's host path stays in the node's log, not the answer.
		n.log.Error("open snapshot volume", "volume", volume, "err", err)
		return nil, "", errors.New("cannot open the " + volumeKind(volume) + "'s filesystem")
	}
	// Clean drops ".." above "/": the volume's root is the sandbox's.
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return root, rel, nil
}

// volumeLookupError describes a failed lookup inside a volume by the
// sandbox's path p only: the *PathError's own path would be a host path.
func volumeLookupError(volume, p string, err error) error {
	status := http.StatusBadRequest
	if errors.Is(err, fs.ErrNotExist) {
		status = http.StatusNotFound
	}
	msg := "cannot open"
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	}
	return &AgentError{Status: status, Message: fmt.Sprintf("%s in %s: %s", p, volumeKind(volume), msg)}
}

// volumeKind names what a volume is to a client: a persistent volume, or
// a snapshot's filesystem.
func volumeKind(volume string) string {
	if strings.HasPrefix(volume, "persistent/") {
		return "volume"
	}
	return "snapshot"
}
