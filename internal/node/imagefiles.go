package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/dirlist"
	"github.com/space-platform/space/internal/ext4image"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// A captured volume of a backend that boots a disk (runtime.BlockRootfs,
// the microVM) holds one file, the sandbox's ext4 root image, rather than
// its tree. ReadVolumeFile and ListVolumeDir read inside that image with
// package ext4image, never by mounting it: the filesystem is the
// sandbox's work, and the host kernel does not parse it. Its symlinks are
// reported, not followed, and listings have depth 1.

// volumeImage returns the root image of a captured volume whose only
// entry is the root image of one of the node's disk-booting backends (a
// gVisor root always holds a tree; a persistent volume is the user's
// files, whatever they are named, and never an image).
func (n *Node) volumeImage(volume string, root *os.Root) (*ext4image.Image, bool) {
	if strings.HasPrefix(volume, "persistent/") {
		return nil, false
	}
	dir, err := root.Open(".")
	if err != nil {
		return nil, false
	}
	names, err := dir.Readdirnames(2)
	dir.Close()
	if err != nil || len(names) != 1 {
		return nil, false
	}
	for _, rt := range n.cfg.Runtimes {
		block, ok := rt.(runtime.BlockRootfs)
		if !ok || block.RootImage() != names[0] {
			continue
		}
		if fi, err := root.Lstat(names[0]); err != nil || !fi.Mode().IsRegular() {
			return nil, false
		}
		img, err := ext4image.Open(filepath.Join(n.cfg.Volumes.Path(volume), names[0]))
		if err != nil {
			n.log.Error("read a disk image volume", "volume", volume, "err", err)
			return nil, false
		}
		return img, true
	}
	return nil, false
}

// readImageFile is ReadVolumeFile inside a root image.
func (n *Node) readImageFile(ctx context.Context, img *ext4image.Image, volume, p string) (io.ReadCloser, *filesystempb.EntryInfo, error) {
	p = path.Clean(p)
	e, err := img.Lstat(ctx, p)
	if err != nil {
		return nil, nil, n.imageError(volume, p, err)
	}
	entry := imageEntry(p, e)
	kind := volumeKind(volume)
	switch {
	case e.Mode.IsDir():
		return http.NoBody, entry, nil
	case e.Mode&fs.ModeSymlink != 0:
		return nil, nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("%s in the %s is a symbolic link to %q; links are not followed in a microVM's %s", p, kind, e.Target, kind)}
	case !e.Mode.IsRegular():
		return nil, nil, &AgentError{Status: http.StatusBadRequest, Message: p + " in the " + kind + " is not a regular file"}
	}
	body, err := img.Open(ctx, e)
	if err != nil {
		return nil, nil, n.imageError(volume, p, err)
	}
	return body, entry, nil
}

// listImageDir is ListVolumeDir inside a root image: one page of the
// directory's entries in byte-wise order of their names, as dirlist
// orders them, with the same cursors.
func (n *Node) listImageDir(ctx context.Context, img *ext4image.Image, volume, p string, depth, limit int, after string) (nodeapi.DirPage, error) {
	if depth != 1 {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: "listings of a microVM's " + volumeKind(volume) + " have depth 1"}
	}
	p = path.Clean(p)
	entries, err := img.ReadDir(ctx, p)
	if err != nil {
		return nil, n.imageError(volume, p, err)
	}
	var page []ext4image.Entry
	next := ""
	for _, e := range entries {
		if e.Name <= after {
			continue
		}
		if len(page) == limit {
			next = page[len(page)-1].Name
			break
		}
		page = append(page, e)
	}
	if err := img.FillTimes(ctx, page); err != nil {
		return nil, n.imageError(volume, p, err)
	}
	out := make([]*filesystempb.EntryInfo, len(page))
	for i, e := range page {
		out[i] = imageEntry(path.Join(p, e.Name), e)
	}
	return &slicePage{entries: out, next: next}, nil
}

// imageError says what failed by the sandbox's path only.
func (n *Node) imageError(volume, p string, err error) error {
	kind := volumeKind(volume)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &AgentError{Status: http.StatusNotFound, Message: fmt.Sprintf("%s in %s: no such file or directory", p, kind)}
	case errors.Is(err, syscall.ENOTDIR):
		return &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("%s in %s: not a directory", p, kind)}
	case errors.Is(err, ext4image.ErrBadPath), errors.Is(err, ext4image.ErrTooLarge):
		return &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("%s in %s: %v", p, kind, err)}
	case errors.Is(err, ext4image.ErrCorrupt):
		n.log.Warn("read a disk image volume", "volume", volume, "path", p, "err", err)
		return &AgentError{Status: http.StatusUnprocessableEntity, Message: fmt.Sprintf("%s in %s: the %s's disk image is damaged (%v)", p, kind, kind, err)}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("read %s in %s: %w", p, kind, err)
	}
	n.log.Error("read a disk image volume", "volume", volume, "path", p, "err", err)
	return fmt.Errorf("read %s in %s: cannot open the %s's disk image", p, kind, kind)
}

// imageEntry describes an entry of a root image as volumeEntry describes
// one of a tree.
func imageEntry(p string, e ext4image.Entry) *filesystempb.EntryInfo {
	kind := filesystempb.FileType_FILE_TYPE_FILE
	switch {
	case e.Mode.IsDir():
		kind = filesystempb.FileType_FILE_TYPE_DIRECTORY
	case e.Mode&fs.ModeSymlink != 0:
		kind = filesystempb.FileType_FILE_TYPE_SYMLINK
	}
	return &filesystempb.EntryInfo{
		Name: path.Base(p), Path: p, Type: kind, Size: e.Size,
		Mode: uint32(e.Mode.Perm()), ModifiedTime: timestamppb.New(e.ModTime),
		Owner: strconv.FormatUint(uint64(e.UID), 10), Group: strconv.FormatUint(uint64(e.GID), 10),
	}
}

// slicePage is a page already read whole (at most a page's limit).
type slicePage struct {
	entries []*filesystempb.EntryInfo
	next    string
}

func (s *slicePage) Next() (*filesystempb.EntryInfo, error) {
	if len(s.entries) == 0 {
		return nil, io.EOF
	}
	e := s.entries[0]
	s.entries = s.entries[1:]
	return e, nil
}

func (s *slicePage) NextCursor() string { return dirlist.EncodeCursor(s.next) }
func (s *slicePage) Close() error       { return nil }
