// Package storage owns the on-disk volumes: template root filesystems and
// sandbox root filesystems.
//
// Volumes live under one root directory and are addressed by slash-separated
// relative names such as "templates/<id>" or "sandboxes/<id>/rootfs". On
// btrfs every volume is a subvolume, so snapshots are constant-time and
// copy-on-write, and disk limits are btrfs qgroup limits (simple quotas
// where the kernel has them: squota.go says why). When the root is
// not on btrfs, Open creates a sparse loop-backed btrfs image and mounts it
// there. When btrfs cannot be used at all, a plain-directory backend that
// copies on snapshot keeps the platform working, without limits.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Backend kinds reported by Pool.Kind.
const (
	KindBtrfs = "btrfs"
	KindCopy  = "copy"
)

// ErrNoLimits is wrapped by SetLimit when the backend cannot enforce disk
// limits (the copy backend, or btrfs with quotas unavailable). It also
// matches errors.ErrUnsupported.
var ErrNoLimits = fmt.Errorf("disk limits not supported by this volume backend: %w", errors.ErrUnsupported)

// Options configures Open.
type Options struct {
	// Root is the directory holding all volumes, e.g. <data-dir>/volumes.
	Root string
	// ImagePath is the loop-backed btrfs image used when Root is not on
	// btrfs. Default: volumes.img next to Root.
	ImagePath string
	// ImageSizeBytes is the (sparse) size of a newly created image.
	// Default: 50% of the free space where the image lives, clamped to
	// [4 GiB, 200 GiB].
	ImageSizeBytes int64
	// Logf receives notable events (image created, fallback to copies).
	Logf func(format string, args ...any)
	// ForceCopy selects the plain-directory backend even where btrfs would
	// work; for tests and for hosts whose operator wants no loop image.
	ForceCopy bool

	// fullQgroups keeps full qgroups where simple quotas would be used,
	// so that tests cover the fallback for kernels older than 6.7.
	fullQgroups bool
}

// Pool is the set of volumes under one root. It is safe for concurrent use;
// operations on the same volume name must be serialized by the caller.
type Pool struct {
	root      string
	imagePath string
	logf      func(format string, args ...any)
	backend   backend
}

// backend is what differs between btrfs subvolumes and plain directories.
// Paths are absolute and already validated.
type backend interface {
	kind() string
	create(p string) error
	snapshot(src, dst string, readOnly bool) error
	setReadOnly(p string, ro bool) error
	remove(p string) error
	setLimit(p string, bytes int64) error
	usage(p string) (int64, error)
}

// Open prepares the volume root and picks the backend. Calling it again on
// the same paths after a restart or crash reuses the existing image, loop
// device and mount.
func Open(ctx context.Context, opts Options) (*Pool, error) {
	if opts.Root == "" {
		return nil, errors.New("storage: Options.Root is required")
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("storage root %s: %w", opts.Root, err)
	}
	p := &Pool{root: root, logf: opts.Logf}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	p.imagePath = opts.ImagePath
	if p.imagePath == "" {
		p.imagePath = filepath.Join(filepath.Dir(root), "volumes.img")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create storage root: %w", err)
	}
	if opts.ForceCopy {
		p.backend = copyBackend{}
		return p, nil
	}
	if err := p.ensureBtrfs(ctx, opts.ImageSizeBytes); err != nil {
		p.logf("storage: WARNING: btrfs unavailable (%v); using plain directories: snapshots are full copies and disk limits are not enforced", err)
		p.backend = copyBackend{}
		return p, nil
	}
	p.backend = newBtrfsBackend(ctx, root, !opts.fullQgroups, p.logf)
	p.cleanStaging()
	return p, nil
}

// ensureBtrfs makes Root a btrfs filesystem, mounting (and if needed
// creating) the loop image when Root is on something else.
func (p *Pool) ensureBtrfs(ctx context.Context, sizeBytes int64) error {
	if onBtrfs(p.root) {
		if err := p.hardenImageMount(ctx); err != nil {
			p.logf("storage: WARNING: %v: setuid programs and device nodes in volumes stay live on the host", err)
		}
		return nil
	}
	if _, err := os.Stat(p.imagePath); errors.Is(err, fs.ErrNotExist) {
		// Mounting over a populated directory would hide volumes a copy
		// backend left there; keep using them instead.
		if empty, err := dirEmpty(p.root); err != nil || !empty {
			return fmt.Errorf("%s already holds plain-directory volumes", p.root)
		}
		if err := p.createImage(ctx, sizeBytes); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("stat image %s: %w", p.imagePath, err)
	}
	if err := p.mountImage(ctx); err != nil {
		return err
	}
	if !onBtrfs(p.root) {
		return fmt.Errorf("%s is not btrfs after mounting %s", p.root, p.imagePath)
	}
	return nil
}

// Kind reports the backend: "btrfs" or "copy".
func (p *Pool) Kind() string { return p.backend.kind() }

// Root is the directory holding all volumes.
func (p *Pool) Root() string { return p.root }

// Path is where the volume named name lives (whether or not it exists).
func (p *Pool) Path(name string) string {
	return filepath.Join(p.root, filepath.FromSlash(path.Clean("/"+name)))
}

// abs validates name and returns its absolute path.
func (p *Pool) abs(name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	return p.Path(name), nil
}

func validName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." {
		return fmt.Errorf("invalid volume name %q: want a clean relative path", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return fmt.Errorf("invalid volume name %q: contains ..", name)
		}
	}
	return nil
}

// Create makes an empty writable volume and returns its path. Parent
// directories are created as plain directories.
func (p *Pool) Create(name string) (string, error) {
	dst, err := p.abs(name)
	if err != nil {
		return "", err
	}
	if err := p.prepareDest(dst); err != nil {
		return "", fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := p.backend.create(dst); err != nil {
		return "", fmt.Errorf("create volume %s: %w", name, err)
	}
	return dst, nil
}

// Snapshot makes dst a copy-on-write snapshot of src (constant time on
// btrfs) and returns dst's path. Volumes nested inside src are not part of
// the snapshot; they appear as empty directories.
func (p *Pool) Snapshot(src, dst string, readOnly bool) (string, error) {
	srcPath, err := p.abs(src)
	if err != nil {
		return "", err
	}
	dstPath, err := p.abs(dst)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(srcPath); err != nil {
		return "", fmt.Errorf("snapshot %s to %s: %w", src, dst, err)
	}
	if err := p.prepareDest(dstPath); err != nil {
		return "", fmt.Errorf("snapshot %s to %s: %w", src, dst, err)
	}
	if err := p.backend.snapshot(srcPath, dstPath, readOnly); err != nil {
		return "", fmt.Errorf("snapshot %s to %s: %w", src, dst, err)
	}
	return dstPath, nil
}

// Rename moves a volume to a new name (both in the same pool). Used to
// publish a finished work volume without copying it.
func (p *Pool) Rename(src, dst string) error {
	srcPath, err := p.abs(src)
	if err != nil {
		return err
	}
	dstPath, err := p.abs(dst)
	if err != nil {
		return err
	}
	if err := p.prepareDest(dstPath); err != nil {
		return fmt.Errorf("rename volume %s to %s: %w", src, dst, err)
	}
	if err := os.Rename(srcPath, dstPath); err != nil {
		return fmt.Errorf("rename volume %s to %s: %w", src, dst, err)
	}
	return nil
}

// prepareDest creates dst's parent directories and refuses an existing dst.
func (p *Pool) prepareDest(dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s: %w", dst, fs.ErrExist)
	}
	return os.MkdirAll(filepath.Dir(dst), 0o755)
}

// SetReadOnly makes a volume read-only (or writable again). The copy
// backend cannot enforce this and silently accepts it.
func (p *Pool) SetReadOnly(name string, ro bool) error {
	dst, err := p.abs(name)
	if err != nil {
		return err
	}
	if err := p.backend.setReadOnly(dst, ro); err != nil {
		return fmt.Errorf("set volume %s read-only=%v: %w", name, ro, err)
	}
	return nil
}

// Delete removes a volume, or a plain directory holding volumes, with
// everything nested in it, read-only or not. Deleting a missing volume is
// not an error.
func (p *Pool) Delete(name string) error {
	dst, err := p.abs(name)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := p.backend.remove(dst); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// Exists reports whether the volume (or directory) name exists.
func (p *Pool) Exists(name string) bool {
	dst, err := p.abs(name)
	if err != nil {
		return false
	}
	_, err = os.Lstat(dst)
	return err == nil
}

// List returns the names (prefix/entry) of the directories directly under
// prefix: volumes, and plain directories that hold volumes such as
// "sandboxes/<id>". A missing prefix lists nothing. Names are sorted.
func (p *Pool) List(prefix string) ([]string, error) {
	dir := p.root
	if prefix != "" && prefix != "." {
		d, err := p.abs(strings.TrimSuffix(prefix, "/"))
		if err != nil {
			return nil, err
		}
		dir = d
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list volumes under %q: %w", prefix, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || dir == p.root && e.Name() == stagingDir {
			continue
		}
		names = append(names, path.Join(strings.TrimSuffix(prefix, "/"), e.Name()))
	}
	sort.Strings(names)
	return names, nil
}

// SetLimit caps the volume's referenced bytes (everything it can see,
// including data shared with the template it was snapshotted from); writes
// beyond it fail with EDQUOT. bytes <= 0 removes the limit. Backends that
// cannot enforce limits return an error wrapping ErrNoLimits.
//
// Under btrfs simple quotas a volume is charged only for what it writes, so
// the limit put on it is bytes less the size of its snapshot source; that is
// known for a snapshot this pool made, limited before the pool was reopened
// (the node limits a volume right after making it).
func (p *Pool) SetLimit(name string, bytes int64) error {
	dst, err := p.abs(name)
	if err != nil {
		return err
	}
	if err := p.backend.setLimit(dst, bytes); err != nil {
		return fmt.Errorf("set disk limit of volume %s: %w", name, err)
	}
	return nil
}

// SetWriteLimit caps what the volume writes itself, for a volume whose
// own contents bound what it can see (a disk image of fixed size): there a
// template's data the volume rewrites is charged twice, and a cap on what
// it sees could trip before the image is full. Under full qgroups, which
// cannot tell the two apart, it is SetLimit.
func (p *Pool) SetWriteLimit(name string, bytes int64) error {
	dst, err := p.abs(name)
	if err != nil {
		return err
	}
	if b, ok := p.backend.(*btrfsBackend); ok {
		b.inherited.forget(dst)
	}
	if err := p.backend.setLimit(dst, bytes); err != nil {
		return fmt.Errorf("set disk limit of volume %s: %w", name, err)
	}
	return nil
}

// Usage returns the bytes charged to the volume: under btrfs simple quotas
// what the volume itself wrote (its snapshot source keeps the charge for
// data they share), under full qgroups everything it references, and a
// du-style walk without quotas.
func (p *Pool) Usage(name string) (int64, error) {
	dst, err := p.abs(name)
	if err != nil {
		return 0, err
	}
	n, err := p.backend.usage(dst)
	if err != nil {
		return 0, fmt.Errorf("disk usage of volume %s: %w", name, err)
	}
	return n, nil
}

// Size returns the bytes the volume's files occupy, shared or not (a
// du-style walk): what a template weighs to the sandboxes made from it,
// where Usage says only what the volume wrote itself.
func (p *Pool) Size(name string) (int64, error) {
	dst, err := p.abs(name)
	if err != nil {
		return 0, err
	}
	n, err := duBytes(dst)
	if err != nil {
		return 0, fmt.Errorf("size of volume %s: %w", name, err)
	}
	return n, nil
}

// Sync flushes the filesystem holding the volume (syncfs).
func (p *Pool) Sync(name string) error {
	dst, err := p.abs(name)
	if err != nil {
		return err
	}
	f, err := os.Open(dst)
	if err != nil {
		return fmt.Errorf("sync volume %s: %w", name, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync volume %s: %w", name, err)
	}
	return nil
}

// WatchQuotas rebuilds the quota numbers whenever the kernel marks them
// inconsistent, until ctx ends. From that moment btrfs stops accounting and
// no volume's limit holds, so running sandboxes need the check as much as
// new ones (SetLimit makes it too). A no-op without btrfs quotas.
func (p *Pool) WatchQuotas(ctx context.Context, every time.Duration) {
	b, ok := p.backend.(*btrfsBackend)
	if !ok || !b.quotas {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := b.ensureAccounting(ctx); err != nil && ctx.Err() == nil {
				p.logf("storage: %v", err)
			}
		}
	}
}

// Close releases the pool. It deliberately leaves the loop image mounted:
// mounts persist across restarts so reopening is instant; see Unmount.
func (p *Pool) Close() error { return nil }

// Unmount unmounts a loop image that Open mounted at Root and detaches its
// loop device. For tests and teardown; a no-op when Root is not a mount of
// the image.
func (p *Pool) Unmount() error {
	return p.unmountImage()
}

func onBtrfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.BTRFS_SUPER_MAGIC
}

func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) == 0 && err != nil {
		return true, nil
	}
	return false, nil
}
