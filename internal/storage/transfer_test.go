package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fillVolume writes a small tree into a volume: files, a directory, a
// symlink, a hard link and a large file that is mostly holes.
func fillVolume(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "hello"), "hello from A\n")
	if err := os.MkdirAll(filepath.Join(dir, "etc", "deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "etc", "deep", "conf"), "key=value\n")
	if err := os.Symlink("etc/deep/conf", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "hello"), filepath.Join(dir, "hello.hard")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 10 << 20, 64<<20 - 5} {
		if _, err := f.WriteAt([]byte("data!"), off); err != nil {
			t.Fatal(err)
		}
	}
}

// treeDigest describes every entry below dir (type, mode, owner, size,
// content hash, link target), so two trees compare equal exactly when
// their contents do.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d size=%d nlink=%d", rel, info.Mode(), st.Uid, st.Gid, info.Size(), st.Nlink)
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", target)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " sha256=%x", h.Sum(nil))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func sendToBuffer(t *testing.T, p *Pool, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := p.Send(context.Background(), name, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func assertNoStaging(t *testing.T, p *Pool) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(p.Root(), stagingDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Fatalf("staging dir holds %d leftovers", len(entries))
	}
}

// twoPools opens two pools, as two nodes hold them, and fills the volume
// name on the first; it returns the pools and the volume's path.
func twoPools(t *testing.T, name string) (a, b *Pool, dir string) {
	t.Helper()
	a, _ = openTestPool(t)
	b, _ = openTestPool(t)
	dir, err := a.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	fillVolume(t, dir)
	return a, b, dir
}

func TestSendReceiveBetweenPools(t *testing.T) {
	a, b, dir := twoPools(t, "templates/t1")
	ctx := context.Background()
	if err := a.SetReadOnly("templates/t1", true); err != nil {
		t.Fatal(err)
	}
	want := treeDigest(t, dir)

	// A read-only template volume arrives read-only.
	stream := sendToBuffer(t, a, "templates/t1")
	if err := b.Receive(ctx, "templates/t1", bytes.NewReader(stream), ReceiveOptions{}); err != nil {
		t.Fatal(err)
	}
	got := b.Path("templates/t1")
	if d := treeDigest(t, got); d != want {
		t.Fatalf("received tree differs:\n got %s\nwant %s", d, want)
	}
	if ro, err := readOnly(ctx, got); err != nil || !ro {
		t.Fatalf("received template volume read-only = %v, %v; want true", ro, err)
	}
	if err := os.WriteFile(filepath.Join(got, "new"), nil, 0o644); err == nil {
		t.Fatal("wrote into a read-only received volume")
	}
	// A received volume is sent on as any other (a template that goes on
	// to a third node).
	back := sendToBuffer(t, b, "templates/t1")
	if err := a.Receive(ctx, "templates/t1-back", bytes.NewReader(back), ReceiveOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := treeDigest(t, a.Path("templates/t1-back")); d != want {
		t.Fatalf("volume sent on differs:\n got %s\nwant %s", d, want)
	}
	// What arrives is a volume of B's own, from which sandboxes snapshot.
	if _, err := b.Snapshot("templates/t1", "sandboxes/s1", false); err != nil {
		t.Fatal(err)
	}
	assertNoStaging(t, a)
	assertNoStaging(t, b)

	// The same stream again: the name is taken, and what is there stays.
	writeFile(t, filepath.Join(b.Path("sandboxes/s1"), "mine"), "keep")
	err := b.Receive(ctx, "sandboxes/s1", bytes.NewReader(stream), ReceiveOptions{Writable: true})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("receive over an existing volume: %v, want ErrExist", err)
	}
	if readFile(t, filepath.Join(b.Path("sandboxes/s1"), "mine")) != "keep" {
		t.Fatal("existing volume changed by a refused receive")
	}
	assertNoStaging(t, b)
	if strings.Contains(err.Error(), b.Root()) {
		t.Fatalf("error names a host path: %v", err)
	}
}

func TestSendWritableReceiveWritableWithLimit(t *testing.T) {
	a, b, dir := twoPools(t, "sandboxes/s1")
	ctx := context.Background()
	want := treeDigest(t, dir)
	// The writable volume is sent through a read-only copy that goes away.
	stream := sendToBuffer(t, a, "sandboxes/s1")
	if ro, err := readOnly(ctx, dir); err != nil || ro {
		t.Fatalf("sent volume read-only = %v, %v; want it left writable", ro, err)
	}
	assertNoStaging(t, a)
	writeFile(t, filepath.Join(dir, "after"), "written after the send")

	if err := b.Receive(ctx, "sandboxes/s1", bytes.NewReader(stream), ReceiveOptions{Writable: true, LimitBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	got := b.Path("sandboxes/s1")
	if d := treeDigest(t, got); d != want {
		t.Fatalf("received tree differs:\n got %s\nwant %s", d, want)
	}
	if ro, err := readOnly(ctx, got); err != nil || ro {
		t.Fatalf("received sandbox volume read-only = %v, %v; want writable", ro, err)
	}
	used, err := b.Usage("sandboxes/s1")
	if err != nil {
		t.Fatal(err)
	}
	if used > 16<<20 {
		t.Fatalf("received volume uses %d bytes: the holes were filled", used)
	}
	// The limit holds on the received volume.
	if err := fillUntilFull(t, filepath.Join(got, "fill"), 64); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("writing 64 MiB into a volume limited to 16 MiB: %v, want EDQUOT", err)
	}
	assertNoStaging(t, b)
}

// streamCommands splits a btrfs send stream (v1) into its header and
// commands, so a test can cut it at a command boundary.
func streamCommands(t *testing.T, stream []byte) (header []byte, cmds [][]byte) {
	t.Helper()
	const hdrLen = 17 // "btrfs-stream\0" + le32 version
	if len(stream) < hdrLen || string(stream[:12]) != "btrfs-stream" {
		t.Fatalf("not a btrfs send stream")
	}
	rest := stream[hdrLen:]
	for len(rest) > 0 {
		n := int(binary.LittleEndian.Uint32(rest[:4])) + 10
		cmds = append(cmds, rest[:n])
		rest = rest[n:]
	}
	return stream[:hdrLen], cmds
}

func TestReceiveRefusesBrokenStreams(t *testing.T) {
	a, b, _ := twoPools(t, "templates/t1")
	ctx := context.Background()
	stream := sendToBuffer(t, a, "templates/t1")
	dir2, err := a.Create("templates/t2")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir2, "other"), "second volume")
	stream2 := sendToBuffer(t, a, "templates/t2")

	header, cmds := streamCommands(t, stream)
	if end := cmds[len(cmds)-1]; binary.LittleEndian.Uint16(end[4:6]) != 21 {
		t.Fatalf("last command is %d, want END (21)", binary.LittleEndian.Uint16(end[4:6]))
	}
	withoutEnd := bytes.Join(append([][]byte{header}, cmds[:len(cmds)-1]...), nil)
	corrupt := bytes.Clone(stream)
	corrupt[len(corrupt)/2] ^= 0xff

	cases := map[string][]byte{
		"empty":                 nil,
		"not a stream":          []byte("this is not a btrfs send stream at all"),
		"truncated mid-command": stream[:len(stream)/2],
		"truncated before end":  withoutEnd,
		"corrupt":               corrupt,
		"two volumes":           append(bytes.Clone(stream), stream2...),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			err := b.Receive(ctx, "sandboxes/x", bytes.NewReader(s), ReceiveOptions{Writable: true})
			if err == nil {
				t.Fatal("receive succeeded")
			}
			t.Logf("refused: %v", err)
			if strings.Contains(err.Error(), b.Root()) {
				t.Fatalf("error names a host path: %v", err)
			}
			if b.Exists("sandboxes/x") {
				t.Fatal("a refused stream left a volume")
			}
			assertNoStaging(t, b)
		})
	}

	// The whole stream still arrives afterwards: nothing was left in the way.
	if err := b.Receive(ctx, "sandboxes/x", bytes.NewReader(stream), ReceiveOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestReceiveRefusesIncrementalStream(t *testing.T) {
	a, _ := openTestPool(t)
	b, _ := openTestPool(t)
	ctx := context.Background()

	dir, err := a.Create("templates/base")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "f"), "base")
	if err := a.SetReadOnly("templates/base", true); err != nil {
		t.Fatal(err)
	}
	if err := b.Receive(ctx, "templates/base", bytes.NewReader(sendToBuffer(t, a, "templates/base")), ReceiveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot("templates/base", "templates/child", true); err != nil {
		t.Fatal(err)
	}
	// An incremental stream against a volume B holds would otherwise
	// copy that volume into the new one.
	out, err := run(ctx, "btrfs", "send", "-q", "-p", a.Path("templates/base"), a.Path("templates/child"))
	if err != nil {
		t.Fatal(err)
	}
	err = b.Receive(ctx, "templates/child", bytes.NewReader(out), ReceiveOptions{})
	if err == nil {
		t.Fatal("incremental stream received")
	}
	t.Logf("refused: %v", err)
	if b.Exists("templates/child") {
		t.Fatal("refused stream left a volume")
	}
	assertNoStaging(t, b)
}

func TestSendErrors(t *testing.T) {
	a, _ := openTestPool(t)
	ctx := context.Background()
	if err := a.Send(ctx, "templates/missing", io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("send of a missing volume: %v, want ErrNotExist", err)
	}
	if err := os.MkdirAll(filepath.Join(a.Root(), "sandboxes", "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, stagingDir+"/x", io.Discard); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("send from the staging dir: %v, want refused", err)
	}
	if err := a.Receive(ctx, stagingDir+"/x", strings.NewReader(""), ReceiveOptions{}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("receive into the staging dir: %v, want refused", err)
	}
	if err := a.Send(ctx, "sandboxes/plain", io.Discard); err == nil {
		t.Fatal("sent a plain directory")
	}
	if _, err := a.Create("sandboxes/s1"); err != nil {
		t.Fatal(err)
	}
	// A reader that went away: the send fails and leaves no copy behind.
	if err := a.Send(ctx, "sandboxes/s1", failingWriter{}); err == nil {
		t.Fatal("send into a broken writer succeeded")
	}
	assertNoStaging(t, a)
	// Leftovers of a crash are gone at the next Open; List never shows them.
	if err := os.MkdirAll(filepath.Join(a.Root(), stagingDir, "crashed"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot("sandboxes/s1", stagingDir+"/crashed/s1", true); err != nil {
		t.Fatal(err)
	}
	names, err := a.List("")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == stagingDir {
			t.Fatalf("List shows the staging dir: %v", names)
		}
	}
	reopened, err := Open(ctx, Options{Root: a.Root(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	assertNoStaging(t, reopened)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("peer went away") }

func TestCopyBackendRefusesStreams(t *testing.T) {
	p, err := Open(context.Background(), Options{Root: filepath.Join(t.TempDir(), "volumes"), ForceCopy: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create("templates/a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), "templates/a", io.Discard); !errors.Is(err, ErrNoStreams) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("send on the copy backend: %v, want ErrNoStreams", err)
	}
	if err := p.Receive(context.Background(), "templates/b", strings.NewReader(""), ReceiveOptions{}); !errors.Is(err, ErrNoStreams) {
		t.Fatalf("receive on the copy backend: %v, want ErrNoStreams", err)
	}
}

// stallingReader yields data, then blocks until ctx ends, as a peer that
// stops sending mid-stream does.
type stallingReader struct {
	ctx  context.Context
	data []byte
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		<-r.ctx.Done()
		return 0, r.ctx.Err()
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReceiveEndsWithContext(t *testing.T) {
	a, b, _ := twoPools(t, "sandboxes/s1")
	stream := sendToBuffer(t, a, "sandboxes/s1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	err := b.Receive(ctx, "sandboxes/s1", &stallingReader{ctx: ctx, data: stream[:len(stream)/2]}, ReceiveOptions{Writable: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("receive of a stalled stream: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("receive took %v to end after its context", d)
	}
	if b.Exists("sandboxes/s1") {
		t.Fatal("a cancelled receive left a volume")
	}
	assertNoStaging(t, b)
}
