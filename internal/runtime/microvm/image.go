package microvm

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/internal/hostpath"
)

// ImageHeadroom is the free space a root image gets beyond its content
// when the caller asks for no size: room for the template's own boot and
// start command. A sandbox's disk is grown to its disk limit when it
// starts (Rootfs.Bytes), so a template's image stays small: a sandbox
// with a limit below the image's size could not keep within it. The
// image is sparse, so headroom costs nothing until written.
const ImageHeadroom = 128 << 20

// BuildImage makes a raw ext4 image at image from the directory rootfs
// with mkfs.ext4 -d (no mount, no loop device): size bytes, or the
// content plus ImageHeadroom when size is 0. The file is sparse.
func BuildImage(ctx context.Context, rootfs, image string, size int64) error {
	if size <= 0 {
		used, err := treeBytes(rootfs)
		if err != nil {
			return fmt.Errorf("build image: %w", err)
		}
		// ext4's own metadata (inode tables, journal) on top of the
		// content: an eighth plus 64 MiB is ample for small trees.
		size = used + used/8 + 64<<20 + ImageHeadroom
	}
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	tmp := image + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("build image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build image: %w", err)
	}
	// -E root_owner: the root directory takes rootfs's owner, not the
	// caller's; no lazy init, so the guest does not zero tables later.
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "space-root", "-d", rootfs,
		"-E", "lazy_itable_init=0,lazy_journal_init=0", "-m", "0", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Chmod(tmp, imageMode); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build image: %w", err)
	}
	if err := os.Rename(tmp, image); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build image: %w", err)
	}
	return nil
}

// imageMode is a root image's, whatever the umask: readable by others,
// since the node reads a snapshot's image as nobody (internal/ext4image,
// which never runs a parser of the guest's filesystem with privilege).
const imageMode = 0o644

// treeBytes sums the apparent sizes of a tree's files.
func treeBytes(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// CloneImage copies image src to dst by reflink: constant time, and the
// clone shares every block with src until either writes it. It fails
// rather than copying where the filesystem cannot share blocks (a full
// copy per sandbox is what the btrfs volumes exist to avoid).
func CloneImage(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "--reflink=always", src, dst).CombinedOutput()
	if err != nil {
		// cp names both paths; a create's error may reach a client.
		msg := strings.NewReplacer(src, "<image>", dst, "<clone>").Replace(strings.TrimSpace(string(out)))
		return fmt.Errorf("clone image: %w: %s", err, msg)
	}
	if err := os.Chmod(dst, imageMode); err != nil {
		return fmt.Errorf("clone image: %w", hostpath.Pathless(err))
	}
	return nil
}
