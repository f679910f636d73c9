// Package imagetar streams a checkpoint image directory as a tar archive
// and unpacks one under strict rules, so that an image moves from one node
// to another as a byte stream. An image is a directory of regular files;
// the archive carries nothing else (no links, devices, owners, absolute or
// upward paths), and unpacking refuses what a hostile or broken peer could
// use to write outside the target or fill the disk.
package imagetar

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultMaxBytes bounds the file bytes Extract accepts when the caller
// gives no bound: larger than any sandbox's memory image, small enough
// that a runaway stream cannot fill a node's disk.
const DefaultMaxBytes int64 = 64 << 30

// maxEntries bounds how many files and directories one archive makes
// (runsc writes a handful per image).
const maxEntries = 4096

// Write archives the directory dir into w: its directories and regular
// files, in lexical order, with the file named last (a name directly in
// dir, or "") written after every other, so that a reader that has it
// has them all. Anything else in dir (a symlink, a device) is an error:
// it is no part of an image.
func Write(ctx context.Context, w io.Writer, dir, last string) error {
	tw := tar.NewWriter(w)
	var lastInfo fs.FileInfo
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("archive: %w", unwrapPath(err))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("archive %s: %w", rel, unwrapPath(err))
		}
		if rel == last && info.Mode().IsRegular() {
			lastInfo = info
			return nil
		}
		return writeEntry(ctx, tw, p, rel, info)
	})
	if err != nil {
		return err
	}
	if last != "" {
		if lastInfo == nil {
			return fmt.Errorf("archive: %s is missing", last)
		}
		if err := writeEntry(ctx, tw, filepath.Join(dir, last), last, lastInfo); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

func writeEntry(ctx context.Context, tw *tar.Writer, p, rel string, info fs.FileInfo) error {
	hdr := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()}
	switch {
	case info.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
	case info.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	default:
		return fmt.Errorf("archive: %s is not a regular file", rel)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", rel, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("archive %s: %w", rel, unwrapPath(err))
	}
	defer f.Close()
	// Exactly the size announced: an image never changes once complete,
	// so a file that grew or shrank is an error, not a short entry.
	if _, err := io.CopyN(tw, ctxReader{ctx, f}, hdr.Size); err != nil {
		return fmt.Errorf("archive %s: %w", rel, unwrapPath(err))
	}
	return nil
}

// Extract unpacks an archive from r into dir, which must exist and be
// empty (a staging directory of the caller's). It accepts regular files
// and directories with relative, clean, downward paths only, each made
// once, and at most maxBytes of file data (DefaultMaxBytes when <= 0).
// Every file is synced before the next is written, so a file the writer
// put last (see Write) is on disk only after all others, and the
// directories' entries are synced before Extract returns. On error dir may
// hold part of the archive; the caller removes it.
func Extract(ctx context.Context, r io.Reader, dir string, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	tr := tar.NewReader(ctxReader{ctx, r})
	var total int64
	dirs := map[string]bool{dir: true}
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return syncDirs(dirs)
		}
		if err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		if n >= maxEntries {
			return fmt.Errorf("unpack: more than %d entries", maxEntries)
		}
		name, err := entryName(hdr)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		// Parents are made as plain directories: nothing in dir is a
		// link (no entry can make one), so no path leads out of it.
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("unpack %s: %w", name, unwrapPath(err))
		}
		dirs[filepath.Dir(target)] = true
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o755); err != nil && !isDir(target) {
				return fmt.Errorf("unpack %s: %w", name, unwrapPath(err))
			}
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > maxBytes-total {
				return fmt.Errorf("unpack %s: the image is larger than %d bytes", name, maxBytes)
			}
			total += hdr.Size
			if err := writeFile(target, hdr, tr); err != nil {
				return fmt.Errorf("unpack %s: %w", name, unwrapPath(err))
			}
		default:
			return fmt.Errorf("unpack %s: not a regular file or directory (type %q)", name, hdr.Typeflag)
		}
	}
}

// entryName validates an entry's path and returns it without a trailing
// slash.
func entryName(hdr *tar.Header) (string, error) {
	name := strings.TrimSuffix(hdr.Name, "/")
	if name == "" || name == "." || !fs.ValidPath(name) || path.Clean(name) != name || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("unpack: refused entry path %q", hdr.Name)
	}
	return name, nil
}

func writeFile(target string, hdr *tar.Header, r io.Reader) error {
	// O_EXCL: an entry never replaces another (or follows a link).
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(hdr.Mode).Perm()&0o755)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, hdr.Size); err != nil {
		f.Close()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDirs makes the entries of the directories files were created in
// durable, so that a caller that renames dir into place after Extract
// never publishes a directory whose files a crash can take back.
func syncDirs(dirs map[string]bool) error {
	for d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("unpack: %w", unwrapPath(err))
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("unpack: %w", unwrapPath(err))
		}
	}
	return nil
}

func isDir(p string) bool {
	info, err := os.Lstat(p)
	return err == nil && info.IsDir()
}

// unwrapPath drops the path an *fs.PathError carries: errors reach
// clients, and host paths must not.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// ctxReader ends a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
