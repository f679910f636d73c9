package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/imagetar"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/storage"
)

var _ nodeapi.Transfer = (*Node)(nil)

// VolumeStreams is what the node's Volumes must also do for the node to
// move volumes to and from other nodes (*storage.Pool does on btrfs).
type VolumeStreams interface {
	Send(ctx context.Context, name string, w io.Writer) error
	Receive(ctx context.Context, name string, r io.Reader, opts storage.ReceiveOptions) error
}

// errNoVolumeStreams: the node's volumes cannot be streamed.
var errNoVolumeStreams = fmt.Errorf("this node's volumes cannot be streamed: %w", errors.ErrUnsupported)

func (n *Node) volumeStreams() (VolumeStreams, error) {
	vs, ok := n.cfg.Volumes.(VolumeStreams)
	if !ok {
		return nil, errNoVolumeStreams
	}
	return vs, nil
}

// SendVolume writes a volume as a stream another node's ReceiveVolume
// makes it from. A writable volume (a running sandbox's) is sent as it is
// when the send starts.
func (n *Node) SendVolume(ctx context.Context, name string, w io.Writer) error {
	if err := nodeapi.ValidName(name); err != nil {
		return fmt.Errorf("send volume: %w", err)
	}
	vs, err := n.volumeStreams()
	if err != nil {
		return fmt.Errorf("send volume %s: %w", name, err)
	}
	// The pool's errors name the volume and no host path.
	return vs.Send(ctx, name, w)
}

// ReceiveVolume makes a volume from a stream another node's SendVolume
// wrote: a template's root volume stays read-only; a sandbox's is made
// writable under its disk limit before it appears under its name.
func (n *Node) ReceiveVolume(ctx context.Context, req nodeapi.ReceiveVolumeRequest, r io.Reader) error {
	if err := nodeapi.ValidName(req.Name); err != nil {
		return fmt.Errorf("receive volume: %w", err)
	}
	if req.DiskMB < 0 {
		return fmt.Errorf("receive volume %s: disk limit %d MB is negative", req.Name, req.DiskMB)
	}
	vs, err := n.volumeStreams()
	if err != nil {
		return fmt.Errorf("receive volume %s: %w", req.Name, err)
	}
	opts := storage.ReceiveOptions{Writable: req.Writable, LimitBytes: int64(req.DiskMB) << 20}
	if err := vs.Receive(ctx, req.Name, r, opts); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("receive volume %s: %w", req.Name, nodeapi.ErrExists)
		}
		return err
	}
	return nil
}

// SendImage writes a complete checkpoint image as a tar stream, its
// completeness marker last: a receiver that has the marker has the image.
func (n *Node) SendImage(ctx context.Context, image string, w io.Writer) error {
	dir, err := n.imagePath(image)
	if err != nil {
		return fmt.Errorf("send image: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, completeMarker)); err != nil {
		if _, derr := os.Stat(dir); errors.Is(derr, fs.ErrNotExist) {
			return fmt.Errorf("send image %s: %w", image, fs.ErrNotExist)
		}
		return fmt.Errorf("send image %s: the image is not complete", image)
	}
	// A suspended sandbox's sessions go with its image (journal_export.go).
	if err := n.exportSessions(image, dir); err != nil {
		return fmt.Errorf("send image %s: %w", image, err)
	}
	if err := imagetar.Write(ctx, w, dir, completeMarker); err != nil {
		return fmt.Errorf("send image %s: %w", image, err)
	}
	return nil
}

// ReceiveImage makes a checkpoint image from a stream another node's
// SendImage wrote. It unpacks into the image's scratch directory (where a
// checkpoint writes too, so a crash leaves what the node already treats
// as a torn image) and renames it into place only once the stream ended
// with the completeness marker. An existing image is never replaced. The
// caller serializes work on one image name.
func (n *Node) ReceiveImage(ctx context.Context, image string, r io.Reader) error {
	dir, err := n.imagePath(image)
	if err != nil {
		return fmt.Errorf("receive image: %w", err)
	}
	if err := n.receiveImage(ctx, dir, r); err != nil {
		return fmt.Errorf("receive image %s: %w", image, err)
	}
	return nil
}

func (n *Node) receiveImage(ctx context.Context, dir string, r io.Reader) (err error) {
	if _, err := os.Lstat(dir); err == nil {
		return nodeapi.ErrExists
	}
	partial := dir + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return errors.New("cannot clear the scratch directory")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return errors.New("cannot make the image's directory")
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(partial)
			n.pruneTransferDirs(filepath.Dir(dir))
		}
	}()
	if err := os.Mkdir(partial, 0o700); err != nil {
		return errors.New("cannot make the scratch directory")
	}
	if err := imagetar.Extract(ctx, r, partial, 0); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(partial, completeMarker)); err != nil {
		return errors.New("the stream ended before the image was complete")
	}
	// RENAME_NOREPLACE: an image made under this name meanwhile stays.
	if err := unix.Renameat2(unix.AT_FDCWD, partial, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nodeapi.ErrExists
		}
		return fmt.Errorf("publish the image: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("publish the image: %w", err)
	}
	return nil
}

// pruneTransferDirs removes the directories between dir and the images
// directory that a failed receive made and left empty.
func (n *Node) pruneTransferDirs(dir string) {
	root := filepath.Clean(n.cfg.ImagesDir) + string(filepath.Separator)
	for p := dir; strings.HasPrefix(p, root); p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			return // not empty, so neither is what holds it
		}
	}
}
