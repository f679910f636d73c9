package storage

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// copyBackend keeps volumes as plain directories. Snapshots are full copies
// (reflinked where the filesystem can, e.g. XFS), read-only is not
// enforced and disk limits are unsupported: it exists so that a host
// without btrfs still runs sandboxes.
type copyBackend struct{}

func (copyBackend) kind() string { return KindCopy }

func (copyBackend) create(p string) error { return os.Mkdir(p, 0o755) }

func (copyBackend) snapshot(src, dst string, _ bool) error {
	// cp -a keeps owners, modes, times, links and xattrs; copying "src/."
	// into a fresh dst copies the contents, not src itself.
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if _, err := run(context.Background(), "cp", "-a", "--reflink=auto", src+"/.", dst); err != nil {
		os.RemoveAll(dst)
		return err
	}
	return nil
}

func (copyBackend) setReadOnly(string, bool) error { return nil }

func (copyBackend) remove(p string) error { return os.RemoveAll(p) }

func (copyBackend) setLimit(string, int64) error { return ErrNoLimits }

func (copyBackend) usage(p string) (int64, error) { return duBytes(p) }

// duBytes sums allocated blocks below p, counting hard-linked files once,
// like du.
func duBytes(p string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		if st.Nlink > 1 && !info.IsDir() {
			key := inode{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
