package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Whiteout markers of the OCI image layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// UnpackArchive unpacks the image in an OCI or docker-save archive onto
// rootfs exactly as a template built from that archive would be, for
// callers that need an image's filesystem without a template (the tests
// of the image scripts/image.sh builds).
func UnpackArchive(archive, rootfs string) error {
	img, err := resolveImage(FromOCIArchive, archive)
	if err != nil {
		return fmt.Errorf("image %s: %w", archive, err)
	}
	return unpackImage(img, rootfs, &unpackBudget{maxEntries: maxImageEntries}, func(string) {})
}

// ErrImageTooLarge fails a build whose image unpacks to more than the
// build may write (its disk limit, or what is left of its project's
// template disk quota), or holds more entries than maxImageEntries.
var ErrImageTooLarge = errors.New("the image is too large")

// maxImageEntries bounds the entries (files, directories, links,
// whiteouts) of all an image's layers together: an empty file costs a
// tar header of 512 bytes, so a million of them fit in any byte limit
// yet cost the host's filesystem an inode each. Large real images hold a
// few hundred thousand.
const maxImageEntries = 500_000

// unpackBudget bounds what unpacking one image writes. Bytes are those of
// the layers' tar streams as they leave decompression, headers, skipped
// entries and files a later layer removes included: nothing unpacking
// writes can exceed them, and a gzip bomb is stopped after limit bytes of
// its output rather than when the disk is full.
type unpackBudget struct {
	// limit is the bytes the layers may unpack to (0: no bound); what
	// names it in the error ("the disk limit of a build").
	limit int64
	what  string
	// maxEntries bounds the entries of all layers (maxImageEntries).
	maxEntries int

	read    int64
	entries int
}

// tooLarge is the error of an image past the budget.
func (b *unpackBudget) tooLarge() error {
	return fmt.Errorf("%w: it unpacks to more than %s, %s; unpacking stopped and the partial template was removed",
		ErrImageTooLarge, humanBytes(b.limit), b.what)
}

// reader charges what r yields to the budget; past the limit it yields
// nothing more.
func (b *unpackBudget) reader(r io.Reader) io.Reader { return budgetReader{r, b} }

// addEntry charges one tar entry.
func (b *unpackBudget) addEntry() error {
	if b.entries++; b.entries > b.maxEntries {
		return fmt.Errorf("%w: its layers hold more than %d entries (files, directories, links)", ErrImageTooLarge, b.maxEntries)
	}
	return nil
}

type budgetReader struct {
	r io.Reader
	b *unpackBudget
}

func (br budgetReader) Read(p []byte) (int, error) {
	if br.b.limit > 0 {
		left := br.b.limit - br.b.read
		if left <= 0 {
			// One byte more than the limit tells a layer that ends
			// exactly at the limit from one that goes on.
			left = 1
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := br.r.Read(p)
	br.b.read += int64(n)
	if br.b.limit > 0 && br.b.read > br.b.limit {
		return 0, br.b.tooLarge()
	}
	return n, err
}

// unpackImage applies the image's layers, bottom first, onto rootfs,
// within budget.
func unpackImage(img *ociImage, rootfs string, budget *unpackBudget, logLine func(string)) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, layer := range img.layers {
		logLine(fmt.Sprintf("layer %d/%d: %s", i+1, len(img.layers), layer))
		rc, err := img.src.open(layer)
		if err != nil {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
		err = applyLayer(root, rc, budget, logLine)
		rc.Close()
		if errors.Is(err, unix.EDQUOT) && budget.limit > 0 {
			// The volume's own limit (createLimited) tripped first: it
			// charges the filesystem's overhead too. Same cause, and
			// the message names the limit, not a path.
			return budget.tooLarge()
		}
		if err != nil {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
	}
	return nil
}

// applyLayer extracts one (possibly gzipped) layer tar. Every path goes
// through os.Root, so neither ".." nor a symlink (planted by this or an
// earlier layer) can make it write outside the rootfs: such entries fail
// the build.
func applyLayer(root *os.Root, r io.Reader, budget *unpackBudget, logLine func(string)) error {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	var tr *tar.Reader
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("gunzip: %w", err)
		}
		defer gz.Close()
		tr = tar.NewReader(budget.reader(gz))
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return errors.New("zstd-compressed layers are not supported; re-export the image with gzip or uncompressed layers")
	default:
		tr = tar.NewReader(budget.reader(br))
	}

	// Paths this layer itself provides: an opaque marker hides only what
	// lower layers put in the directory.
	provided := map[string]bool{}
	var opaqueDirs []string
	skipped := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		if err := budget.addEntry(); err != nil {
			return err
		}
		name, err := cleanEntryName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		switch {
		case base == whiteoutOpaque:
			opaqueDirs = append(opaqueDirs, dir)
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
			if err := root.RemoveAll(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("whiteout %s: %w", target, err)
			}
			continue
		}
		for p := name; p != "." && p != "/"; p = path.Dir(p) {
			provided[p] = true
		}
		ok, err := extractEntry(root, tr, hdr, name)
		if err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		if !ok {
			skipped++
		}
	}
	for _, dir := range opaqueDirs {
		if err := clearOpaque(root, dir, provided); err != nil {
			return fmt.Errorf("opaque directory %s: %w", dir, err)
		}
	}
	if skipped > 0 {
		logLine(fmt.Sprintf("skipped %d entries of unsupported types", skipped))
	}
	return nil
}

// cleanEntryName makes a tar name relative to the rootfs and refuses ones
// that climb out of it.
func cleanEntryName(name string) (string, error) {
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("refusing tar entry %q: escapes the rootfs", name)
		}
	}
	clean := path.Clean("/" + name)
	if clean == "/" {
		return ".", nil
	}
	return strings.TrimPrefix(clean, "/"), nil
}

// extractEntry writes one tar entry; it reports false for entry types it
// skips.
func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) (bool, error) {
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return false, err
		}
	}
	existing, statErr := root.Lstat(name)
	exists := statErr == nil
	// Anything but a directory over a directory replaces what was there.
	if exists && !(hdr.Typeflag == tar.TypeDir && existing.IsDir()) {
		if err := root.RemoveAll(name); err != nil {
			return false, err
		}
	}
	mode := hdr.FileInfo().Mode()
	perm := mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists || !existing.IsDir() {
			if err := root.Mkdir(name, 0o700); err != nil {
				return false, err
			}
		}
	case tar.TypeReg, tar.TypeRegA:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return false, err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return false, err
		}
		setXattrs(f, hdr)
		if err := f.Close(); err != nil {
			return false, err
		}
	case tar.TypeSymlink:
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return false, err
		}
		return true, root.Lchown(name, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		target, err := cleanEntryName(hdr.Linkname)
		if err != nil {
			return false, err
		}
		// A hard link shares the target's inode and so its metadata.
		return true, root.Link(target, name)
	case tar.TypeChar, tar.TypeBlock:
		// An image is untrusted: a device node in the volume would be a
		// door to host hardware for whatever on the host opens it. The
		// runtime gives sandboxes their own /dev.
		return false, nil
	case tar.TypeFifo:
		if err := mknodIn(root, name, hdr); err != nil {
			return false, err
		}
	default:
		return false, nil
	}
	// chown before chmod: chown clears setuid/setgid bits.
	if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return false, err
	}
	if err := root.Chmod(name, perm); err != nil {
		return false, err
	}
	if hdr.Typeflag != tar.TypeDir {
		// Directory times would be disturbed by later entries anyway.
		_ = root.Chtimes(name, hdr.AccessTime, hdr.ModTime)
	}
	return true, nil
}

// mknodIn creates a FIFO relative to its parent directory
// opened through the root, so the node cannot land outside it.
func mknodIn(root *os.Root, name string, hdr *tar.Header) error {
	parent, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	return unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFIFO|0o600, 0)
}

// setXattrs restores extended attributes such as security.capability
// (e.g. ping's cap_net_raw); best effort, as the filesystem may refuse
// some namespaces.
func setXattrs(f *os.File, hdr *tar.Header) {
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			_ = unix.Fsetxattr(int(f.Fd()), name, []byte(v), 0)
		}
	}
}

// clearOpaque removes everything under dir that this layer did not itself
// provide, i.e. all content of lower layers.
func clearOpaque(root *os.Root, dir string, provided map[string]bool) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		if !provided[p] {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		if e.IsDir() {
			if err := clearOpaque(root, p, provided); err != nil {
				return err
			}
		}
	}
	return nil
}
