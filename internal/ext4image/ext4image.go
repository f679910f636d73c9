// Package ext4image reads files and directories out of an ext4 image file
// that a sandbox wrote (a microVM's root disk) without the host kernel
// ever mounting it: the image is attacker-controlled, and the kernel's
// ext4 driver is not hardened against crafted filesystems. The reading is
// debugfs's (e2fsprogs), a user-space process the node bounds:
//
//   - it runs as nobody, with no capabilities and in an empty network
//     namespace, and reaches the image only through a descriptor this
//     process opened read-only (debugfs's catastrophic mode: no bitmaps);
//   - every metadata call is bounded in time and output; a file's bytes
//     are streamed, and debugfs is killed if it stalls;
//   - paths are resolved by debugfs inside the image only: a symlink in
//     it leads elsewhere in the image, never to the host; the last
//     component's symlink is reported, not followed.
package ext4image

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of one debugfs call.
const (
	// callTimeout bounds a metadata call (stat, a directory's listing).
	callTimeout = 30 * time.Second
	// stallTimeout bounds how long a file's stream may produce nothing
	// while its reader waits.
	stallTimeout = 30 * time.Second
	// maxListing bounds the text of one directory's listing (about a
	// million entries).
	maxListing = 64 << 20
	// maxMeta bounds any other call's text.
	maxMeta = 1 << 20
	// maxLinkTarget is the longest symlink target read (PATH_MAX).
	maxLinkTarget = 4096
)

// nobody runs debugfs.
const nobody = 65534

// Errors, to be told apart by errors.Is.
var (
	// ErrCorrupt: the image is not an ext4 filesystem debugfs can read,
	// or debugfs failed on it.
	ErrCorrupt = errors.New("the image's filesystem cannot be read")
	// ErrBadPath: a path this reader does not pass to debugfs.
	ErrBadPath = errors.New("path cannot be read from an image")
	// ErrTooLarge: a directory too large to list.
	ErrTooLarge = errors.New("directory too large to list from an image")
)

// Image is an ext4 image file on the host.
type Image struct {
	path    string
	debugfs string
}

// Open checks that debugfs is there; the image is opened by each call.
func Open(imagePath string) (*Image, error) {
	bin, err := exec.LookPath("debugfs")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/debugfs"); serr != nil {
			return nil, fmt.Errorf("read an ext4 image: no debugfs (e2fsprogs): %w", err)
		}
		bin = "/usr/sbin/debugfs"
	}
	return &Image{path: imagePath, debugfs: bin}, nil
}

// Entry describes one inode of the image.
type Entry struct {
	Name    string // the last path component ("/" for the root)
	Inode   uint64
	Mode    fs.FileMode // type and permission bits, Go's way
	UID     uint32
	GID     uint32
	Size    int64
	ModTime time.Time // zero in a listing until FillTimes
	// Target is a symlink's target (Lstat only).
	Target string
}

// Lstat describes the entry at p (absolute, inside the image) without
// following a symlink at its end. A missing entry is fs.ErrNotExist.
func (im *Image) Lstat(ctx context.Context, p string) (Entry, error) {
	arg, err := quotePath(p)
	if err != nil {
		return Entry{}, err
	}
	out, err := im.run(ctx, "stat "+arg)
	if err != nil {
		return Entry{}, err
	}
	e, err := parseStat(out)
	if err != nil {
		return Entry{}, err
	}
	e.Name = path.Base(path.Clean(p))
	if e.Mode&fs.ModeSymlink != 0 {
		if e.Target, err = im.linkTarget(ctx, e, out); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// linkTarget reads a symlink's target: in the inode itself ("fast"), or in
// its data block.
func (im *Image) linkTarget(ctx context.Context, e Entry, statOut []byte) (string, error) {
	if m := fastLinkRE.FindSubmatch(statOut); m != nil {
		return string(m[1]), nil
	}
	if e.Size > maxLinkTarget {
		return "", fmt.Errorf("%w: a symlink target of %d bytes", ErrCorrupt, e.Size)
	}
	out, err := im.run(ctx, fmt.Sprintf("cat <%d>", e.Inode))
	if err != nil {
		return "", err
	}
	if int64(len(out)) > e.Size {
		out = out[:e.Size]
	}
	return string(out), nil
}

// ReadDir lists the directory at p, depth 1, sorted by name, without "."
// and "..", and without modification times (FillTimes adds them for the
// entries that are kept).
func (im *Image) ReadDir(ctx context.Context, p string) ([]Entry, error) {
	e, err := im.Lstat(ctx, p)
	if err != nil {
		return nil, err
	}
	if !e.Mode.IsDir() {
		return nil, fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
	}
	out, err := im.runLimit(ctx, fmt.Sprintf("ls -p <%d>", e.Inode), maxListing)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	for _, line := range strings.Split(string(out), "\n") {
		e, ok := parseListLine(line)
		if ok && e.Name != "." && e.Name != ".." {
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

// FillTimes reads the modification time of each entry, in one debugfs run.
func (im *Image) FillTimes(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	var script strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&script, "stat <%d>\n", e.Inode)
	}
	out, err := im.runScript(ctx, script.String(), maxMeta+int64(len(entries))*2048)
	if err != nil {
		return err
	}
	// With -f, debugfs echoes each command before its output.
	times := map[uint64]time.Time{}
	var cur uint64
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "debugfs: stat <"); ok {
			cur, _ = strconv.ParseUint(strings.TrimSuffix(rest, ">"), 10, 64)
			continue
		}
		if t, ok := parseTime(line, "mtime"); ok {
			times[cur] = t
		}
	}
	for i := range entries {
		entries[i].ModTime = times[entries[i].Inode]
	}
	return nil
}

// Open streams the bytes of a regular file Lstat described. Reading
// fails (rather than ending early) if debugfs stops short of the size.
func (im *Image) Open(ctx context.Context, e Entry) (io.ReadCloser, error) {
	if !e.Mode.IsRegular() {
		return nil, fmt.Errorf("open inode %d: not a regular file", e.Inode)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd, img, err := im.command(ctx, "-R", fmt.Sprintf("cat <%d>", e.Inode))
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		img.Close()
		cancel()
		return nil, err
	}
	stderr := &limitedBuffer{max: maxMeta}
	cmd.Stderr = stderr
	err = cmd.Start()
	img.Close()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("debugfs: %w", err)
	}
	return &fileStream{cmd: cmd, cancel: cancel, out: stdout, left: e.Size, stderr: stderr}, nil
}

// fileStream is a file's bytes as debugfs writes them.
type fileStream struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	out    io.Reader
	left   int64
	stderr *limitedBuffer
	once   sync.Once
}

func (f *fileStream) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	// Only the time debugfs makes us wait counts, not a slow client's.
	stall := time.AfterFunc(stallTimeout, f.cancel)
	n, err := f.out.Read(p)
	stopped := stall.Stop()
	f.left -= int64(n)
	if f.left == 0 {
		return n, io.EOF
	}
	if err != nil {
		if !stopped {
			return n, fmt.Errorf("%w: debugfs stalled for %s", ErrCorrupt, stallTimeout)
		}
		return n, fmt.Errorf("%w: the file ended %d bytes short of its size%s", ErrCorrupt, f.left, f.stderr.reason())
	}
	return n, nil
}

func (f *fileStream) Close() error {
	f.once.Do(func() {
		f.cancel()
		_ = f.cmd.Wait()
	})
	return nil
}

// run runs one debugfs request and returns its output.
func (im *Image) run(ctx context.Context, request string) ([]byte, error) {
	return im.runLimit(ctx, request, maxMeta)
}

func (im *Image) runLimit(ctx context.Context, request string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd, img, err := im.command(ctx, "-R", request)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	return collect(ctx, cmd, limit)
}

// runScript runs several requests, one a line, read from stdin.
func (im *Image) runScript(ctx context.Context, script string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd, img, err := im.command(ctx, "-f", "-")
	if err != nil {
		return nil, err
	}
	defer img.Close()
	cmd.Stdin = strings.NewReader(script)
	return collect(ctx, cmd, limit)
}

// collect runs cmd and returns its output, failing on any complaint of
// debugfs beyond its banner, or output past limit.
func collect(ctx context.Context, cmd *exec.Cmd, limit int64) ([]byte, error) {
	stdout := &limitedBuffer{max: limit}
	stderr := &limitedBuffer{max: maxMeta}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: debugfs took longer than %s", ErrCorrupt, callTimeout)
	}
	if stdout.over {
		return nil, ErrTooLarge
	}
	if msg := stderr.complaint(); msg != "" {
		switch {
		case strings.Contains(msg, "File not found by ext2_lookup"):
			return nil, fs.ErrNotExist
		case strings.Contains(msg, "Ext2 inode is not a directory"):
			return nil, syscall.ENOTDIR // a file on the way
		}
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: debugfs: %v", ErrCorrupt, err)
	}
	return stdout.Bytes(), nil
}

// command prepares debugfs on the image: the image as its descriptor 3,
// which it opens again by /proc/self/fd/3 (a plain read-only open: as
// nobody, it needs no way to the volume's directory, only a readable
// image).
func (im *Image) command(ctx context.Context, args ...string) (*exec.Cmd, *os.File, error) {
	img, err := os.Open(im.path)
	if err != nil {
		return nil, nil, fmt.Errorf("open the image: %w", errors.Unwrap(err))
	}
	all := append([]string{"-c"}, args...)
	all = append(all, "/proc/self/fd/3")
	cmd := exec.CommandContext(ctx, im.debugfs, all...)
	cmd.ExtraFiles = []*os.File{img}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PAGER=__none__", "DEBUGFS_PAGER=__none__", "LANG=C"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNET,
	}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	return cmd, img, nil
}

// quotePath validates an absolute path and quotes it for debugfs's
// request parser (double quotes, a quote doubled).
func quotePath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%w: %q is not absolute", ErrBadPath, p)
	}
	p = path.Clean(p)
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: it holds a control character", ErrBadPath)
		}
	}
	if strings.ContainsRune(p, '"') {
		return "", fmt.Errorf("%w: it holds a double quote", ErrBadPath)
	}
	return `"` + p + `"`, nil
}

var (
	statInodeRE = regexp.MustCompile(`(?m)^Inode: (\d+)\s+Type: ([a-zA-Z ]+?)\s+Mode:\s+([0-7]+)`)
	statOwnerRE = regexp.MustCompile(`(?m)^User:\s+(\d+)\s+Group:\s+(\d+)(?:\s+Project:\s+\d+)?\s+Size: (\d+)`)
	fastLinkRE  = regexp.MustCompile(`(?m)^Fast link dest: "(.*)"$`)
)

// parseStat reads debugfs's stat of one inode.
func parseStat(out []byte) (Entry, error) {
	m := statInodeRE.FindSubmatch(out)
	o := statOwnerRE.FindSubmatch(out)
	if m == nil || o == nil {
		return Entry{}, fmt.Errorf("%w: debugfs's stat is not understood", ErrCorrupt)
	}
	ino, _ := strconv.ParseUint(string(m[1]), 10, 64)
	perm, _ := strconv.ParseUint(string(m[3]), 8, 32)
	uid, _ := strconv.ParseUint(string(o[1]), 10, 32)
	gid, _ := strconv.ParseUint(string(o[2]), 10, 32)
	size, _ := strconv.ParseInt(string(o[3]), 10, 64)
	e := Entry{Inode: ino, Mode: goMode(typeBits(string(m[2])) | uint32(perm)), UID: uint32(uid), GID: uint32(gid), Size: size}
	for _, line := range strings.Split(string(out), "\n") {
		if t, ok := parseTime(line, "mtime"); ok {
			e.ModTime = t
		}
	}
	return e, nil
}

// typeBits maps debugfs's type names to the inode's S_IFMT bits.
func typeBits(name string) uint32 {
	switch name {
	case "regular":
		return syscall.S_IFREG
	case "directory":
		return syscall.S_IFDIR
	case "symlink":
		return syscall.S_IFLNK
	case "FIFO":
		return syscall.S_IFIFO
	case "socket":
		return syscall.S_IFSOCK
	case "character special":
		return syscall.S_IFCHR
	case "block special":
		return syscall.S_IFBLK
	}
	return 0
}

// goMode turns an inode's st_mode into an fs.FileMode.
func goMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	case syscall.S_IFREG:
	default:
		mode |= fs.ModeIrregular
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// parseTime reads " mtime: 0x<sec>[:<extra>] -- ..." (the extra word, on
// large inodes, holds two more epoch bits and the nanoseconds).
func parseTime(line, field string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), field+": 0x")
	if !ok {
		return time.Time{}, false
	}
	stamp, _, _ := strings.Cut(rest, " ")
	loHex, extraHex, hasExtra := strings.Cut(stamp, ":")
	lo, err := strconv.ParseUint(loHex, 16, 32)
	if err != nil {
		return time.Time{}, false
	}
	sec, nsec := int64(int32(uint32(lo))), int64(0)
	if hasExtra {
		if extra, err := strconv.ParseUint(strings.TrimPrefix(extraHex, "0x"), 16, 32); err == nil {
			sec += int64(extra&3) << 32
			nsec = int64(extra >> 2)
			if nsec > 999999999 {
				nsec = 0
			}
		}
	}
	return time.Unix(sec, nsec).UTC(), true
}

// parseListLine reads a line of "ls -p": /inode/mode/uid/gid/name/size/.
// The name is what lies between the fourth slash and the size, so a name
// a crafted image gives a slash still parses; a line a newline in a name
// cut short does not, and is skipped.
func parseListLine(line string) (Entry, bool) {
	if !strings.HasPrefix(line, "/") || !strings.HasSuffix(line, "/") || len(line) < 2 {
		return Entry{}, false
	}
	fields := strings.SplitN(line[1:], "/", 5)
	if len(fields) != 5 {
		return Entry{}, false
	}
	rest := strings.TrimSuffix(fields[4], "/")
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		return Entry{}, false
	}
	name, sizeText := rest[:i], rest[i+1:]
	ino, err1 := strconv.ParseUint(fields[0], 10, 64)
	mode, err2 := strconv.ParseUint(fields[1], 8, 32)
	uid, err3 := strconv.ParseUint(fields[2], 10, 32)
	gid, err4 := strconv.ParseUint(fields[3], 10, 32)
	if err := errors.Join(err1, err2, err3, err4); err != nil || name == "" || strings.Contains(name, "/") {
		return Entry{}, false
	}
	size, _ := strconv.ParseInt(sizeText, 10, 64) // empty for a directory
	return Entry{Name: name, Inode: ino, Mode: goMode(uint32(mode)), UID: uint32(uid), GID: uint32(gid), Size: size}, true
}

// limitedBuffer keeps at most max bytes and notes that more came.
type limitedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	max  int64
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - int64(b.buf.Len()); int64(len(p)) > room {
		b.buf.Write(p[:max(room, 0)])
		b.over = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}

// complaint is what debugfs said on stderr beyond its version banner.
func (b *limitedBuffer) complaint() string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "debugfs ") && strings.Contains(line, "(") && !strings.Contains(line, ":") {
			continue
		}
		lines = append(lines, line)
	}
	msg := strings.Join(lines, "; ")
	// debugfs names the image by the path it opened: ours, not a host's.
	msg = strings.ReplaceAll(msg, "/proc/self/fd/3", "the image")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

func (b *limitedBuffer) reason() string {
	if msg := b.complaint(); msg != "" {
		return ": " + msg
	}
	return ""
}
