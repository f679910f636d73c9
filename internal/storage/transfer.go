package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoStreams is wrapped by Send and Receive on a backend that cannot
// stream volumes (the copy backend): moving volumes between nodes needs
// btrfs. It also matches errors.ErrUnsupported.
var ErrNoStreams = fmt.Errorf("volume streams need the btrfs backend: %w", errors.ErrUnsupported)

// stagingDir holds, under the pool's root, the read-only copies a send
// takes of writable volumes and the streams a receive has not finished.
// Its name is no volume name a node hands out, and Open empties it: what
// it holds after a crash is garbage.
const stagingDir = ".staging"

// ReceiveOptions says what a received volume becomes.
type ReceiveOptions struct {
	// Writable makes the volume writable; otherwise it stays read-only,
	// as btrfs receive leaves it.
	Writable bool
	// LimitBytes, when > 0, is set as the volume's disk limit before the
	// volume appears under its name.
	LimitBytes int64
}

// Send writes the volume name to w as a btrfs send stream (a full one:
// no parent). A read-only volume is sent as it is; a writable one through
// a read-only snapshot taken now and deleted afterwards, so the stream is
// one consistent point in time even while the volume is written.
func (p *Pool) Send(ctx context.Context, name string, w io.Writer) error {
	if err := p.send(ctx, name, w); err != nil {
		return fmt.Errorf("send volume %s: %w", name, err)
	}
	return nil
}

func (p *Pool) send(ctx context.Context, name string, w io.Writer) error {
	b, ok := p.backend.(*btrfsBackend)
	if !ok {
		return ErrNoStreams
	}
	src, err := p.transferPath(name)
	if err != nil {
		return err
	}
	if !isSubvolume(src) {
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			return fs.ErrNotExist
		}
		return errors.New("not a volume")
	}
	ro, err := readOnly(ctx, src)
	if err != nil {
		return p.scrub(err)
	}
	if !ro {
		tmp, err := p.newStaging()
		if err != nil {
			return err
		}
		defer p.dropStaging(b, tmp)
		snap := filepath.Join(tmp, filepath.Base(src))
		if err := b.snapshot(src, snap, true); err != nil {
			return p.scrub(err)
		}
		src = snap
	}
	// -q: btrfs send prints the subvolume's name on stderr otherwise,
	// and stderr is kept for the error.
	return p.stream(ctx, exec.CommandContext(ctx, "btrfs", "send", "-q", src), nil, w)
}

// Receive makes the volume name from a btrfs send stream read from r.
// The stream is received into a staging directory of its own (btrfs
// receive confined to it by chroot) and checked before anything appears
// under name: it must have produced exactly one subvolume, a whole one
// rather than a snapshot of some other volume of this pool (which an
// incremental stream would name as its parent). Only then is it made
// writable and limited as opts says, and renamed to name, which must not
// exist (an existing volume is never replaced). On any failure nothing of
// the stream is left.
func (p *Pool) Receive(ctx context.Context, name string, r io.Reader, opts ReceiveOptions) error {
	if err := p.receive(ctx, name, r, opts); err != nil {
		return fmt.Errorf("receive volume %s: %w", name, err)
	}
	return nil
}

func (p *Pool) receive(ctx context.Context, name string, r io.Reader, opts ReceiveOptions) error {
	b, ok := p.backend.(*btrfsBackend)
	if !ok {
		return ErrNoStreams
	}
	dst, err := p.transferPath(name)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return fs.ErrExist
	}
	tmp, err := p.newStaging()
	if err != nil {
		return err
	}
	defer p.dropStaging(b, tmp)
	// -C chroots into the staging directory, so no path the stream names
	// reaches outside it; -E 1 stops at the first error instead of
	// applying the rest of a broken stream.
	cmd := exec.CommandContext(ctx, "btrfs", "receive", "-C", "-E", "1", tmp)
	if err := p.stream(ctx, cmd, r, nil); err != nil {
		return err
	}
	got, err := receivedSubvolume(ctx, tmp)
	if err != nil {
		return p.scrub(err)
	}
	// Writable first even for a read-only volume: btrfs refuses to rename
	// a read-only subvolume (the rename writes its root inode).
	if err := b.setReadOnly(got, false); err != nil {
		return p.scrub(err)
	}
	if opts.LimitBytes > 0 {
		if err := b.setLimit(got, opts.LimitBytes); err != nil {
			return p.scrub(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return p.scrub(err)
	}
	// RENAME_NOREPLACE: a volume made under name since the check above
	// is not replaced either.
	if err := unix.Renameat2(unix.AT_FDCWD, got, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fs.ErrExist
		}
		return fmt.Errorf("publish: %w", err)
	}
	if !opts.Writable {
		// Nothing uses the name before Receive returns (the caller
		// serializes work on one volume), so the moment it was writable
		// under it is harmless.
		if err := b.setReadOnly(dst, true); err != nil {
			if derr := b.remove(dst); derr != nil {
				p.logf("storage: deleting volume %s after a failed receive: %v", name, p.scrub(derr))
			}
			return p.scrub(err)
		}
	}
	return syncDir(filepath.Dir(dst))
}

// transferPath is abs for a volume a transfer names: the staging dir is
// no volume and cannot be sent or received into.
func (p *Pool) transferPath(name string) (string, error) {
	if first, _, _ := strings.Cut(name, "/"); first == stagingDir {
		return "", fmt.Errorf("invalid volume name %q: reserved", name)
	}
	return p.abs(name)
}

// receivedSubvolume returns the one subvolume btrfs receive made in dir,
// or an error when it made anything else.
func receivedSubvolume(ctx context.Context, dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("stream carried %d entries, want one volume", len(entries))
	}
	got := filepath.Join(dir, entries[0].Name())
	if !isSubvolume(got) {
		return "", errors.New("stream carried no volume")
	}
	out, err := run(ctx, "btrfs", "subvolume", "show", got)
	if err != nil {
		return "", err
	}
	parent, received := showField(out, "Parent UUID:"), showField(out, "Received UUID:")
	if parent != "-" {
		return "", errors.New("stream is a snapshot of another volume (incremental streams are not accepted)")
	}
	if received == "" || received == "-" {
		// btrfs receive sets the received UUID when the stream ends
		// well; a subvolume without one is not a finished receive.
		return "", errors.New("stream did not finish")
	}
	return got, nil
}

// showField returns the value of a "Key: value" line of btrfs subvolume
// show ("" when there is none).
func showField(out []byte, key string) string {
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// readOnly reports a subvolume's ro property.
func readOnly(ctx context.Context, p string) (bool, error) {
	out, err := run(ctx, "btrfs", "property", "get", "-ts", p, "ro")
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(string(out)) {
	case "ro=true":
		return true, nil
	case "ro=false":
		return false, nil
	}
	return false, fmt.Errorf("unexpected ro property %q", strings.TrimSpace(string(out)))
}

// stream runs a btrfs send or receive with stdin r and stdout w (either
// may be nil) and returns its error with what it said on stderr, or ctx's
// error when ctx ended it.
func (p *Pool) stream(ctx context.Context, cmd *exec.Cmd, r io.Reader, w io.Writer) error {
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, w, &stderr
	// A peer that stops sending leaves the copy into btrfs blocked on r
	// after ctx killed btrfs; do not wait for it forever.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		msg := errorLines(stderr.String())
		return p.scrub(fmt.Errorf("%s %s: %w: %s", filepath.Base(cmd.Path), cmd.Args[1], err, msg))
	}
	return nil
}

// errorLines keeps btrfs's ERROR lines of its stderr (it also reports
// progress there: "At subvol ..."), or all of it when there are none.
func errorLines(stderr string) string {
	var errs []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "ERROR") {
			errs = append(errs, strings.TrimSpace(line))
		}
	}
	if len(errs) == 0 {
		return strings.TrimSpace(stderr)
	}
	return strings.Join(errs, "; ")
}

// scrub rewrites the pool's paths in err's text relative to the pool, so
// that no host path reaches a client: btrfs names the paths it fails on.
func (p *Pool) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, p.root+"/", "")
	clean = strings.ReplaceAll(clean, p.root, "")
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

// scrubbedError keeps the error chain (errors.Is still sees through it)
// under a message without host paths.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// newStaging makes an empty directory of its own under the staging dir.
func (p *Pool) newStaging() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	dir := filepath.Join(p.root, stagingDir, hex.EncodeToString(b[:]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", p.scrub(err)
	}
	return dir, nil
}

// dropStaging deletes a staging directory and every subvolume in it.
func (p *Pool) dropStaging(b *btrfsBackend, dir string) {
	if err := b.remove(dir); err != nil {
		p.logf("storage: cleaning up %s: %v", strings.TrimPrefix(dir, p.root+"/"), err)
	}
}

// cleanStaging deletes what sends and receives a crash interrupted left in
// the staging dir.
func (p *Pool) cleanStaging() {
	b, ok := p.backend.(*btrfsBackend)
	if !ok {
		return
	}
	dir := filepath.Join(p.root, stagingDir)
	if _, err := os.Lstat(dir); err != nil {
		return
	}
	p.dropStaging(b, dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
