package node

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/storage"
)

// transferNode is a node with only what transfers use: its images
// directory and a btrfs pool of its own on a loop image (each test node is
// a machine of its own).
func transferNode(t *testing.T) (*Node, *storage.Pool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mount, btrfs)")
	}
	dir := t.TempDir()
	pool, err := storage.Open(context.Background(), storage.Options{
		Root:           filepath.Join(dir, "volumes"),
		ImagePath:      filepath.Join(dir, "volumes.img"),
		ImageSizeBytes: 1 << 30,
		Logf:           t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	if pool.Kind() != storage.KindBtrfs {
		t.Fatalf("pool kind %q, want btrfs", pool.Kind())
	}
	images := filepath.Join(dir, "images")
	return &Node{cfg: Config{ImagesDir: images, Volumes: pool}, log: slog.Default(), sandboxes: map[string]*Sandbox{}}, pool
}

// streamPipe runs send into one end of a pipe and receive from the other at the
// same time, as the node RPC streams them, and returns both errors.
func streamPipe(send func(io.Writer) error, receive func(io.Reader) error) (sendErr, recvErr error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := send(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	recvErr = receive(pr)
	pr.CloseWithError(errors.New("receiver finished"))
	return <-done, recvErr
}

func hasCompleteMarker(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, completeMarker))
	return err == nil
}

func TestTransferVolumeBetweenNodes(t *testing.T) {
	a, poolA := transferNode(t)
	b, poolB := transferNode(t)
	ctx := context.Background()

	dir, err := poolA.Create("templates/t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("from A"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("hello", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := poolA.SetReadOnly("templates/t1", true); err != nil {
		t.Fatal(err)
	}
	sendErr, recvErr := streamPipe(
		func(w io.Writer) error { return a.SendVolume(ctx, "templates/t1", w) },
		func(r io.Reader) error {
			return b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: "templates/t1"}, r)
		})
	if sendErr != nil || recvErr != nil {
		t.Fatalf("send: %v, receive: %v", sendErr, recvErr)
	}
	got, err := os.ReadFile(filepath.Join(poolB.Path("templates/t1"), "link"))
	if err != nil || string(got) != "from A" {
		t.Fatalf("received volume: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(poolB.Path("templates/t1"), "x"), nil, 0o644); err == nil {
		t.Fatal("received template volume is writable")
	}

	// A sandbox's volume arrives writable.
	if _, err := poolA.Snapshot("templates/t1", "sandboxes/s1", false); err != nil {
		t.Fatal(err)
	}
	sendErr, recvErr = streamPipe(
		func(w io.Writer) error { return a.SendVolume(ctx, "sandboxes/s1", w) },
		func(r io.Reader) error {
			return b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: "sandboxes/s1", Writable: true, DiskMB: 64}, r)
		})
	if sendErr != nil || recvErr != nil {
		t.Fatalf("send: %v, receive: %v", sendErr, recvErr)
	}
	if err := os.WriteFile(filepath.Join(poolB.Path("sandboxes/s1"), "x"), []byte("on B"), 0o644); err != nil {
		t.Fatalf("received sandbox volume: %v", err)
	}

	// Again: the volume exists, and the sender sees its reader go away.
	_, recvErr = streamPipe(
		func(w io.Writer) error { return a.SendVolume(ctx, "sandboxes/s1", w) },
		func(r io.Reader) error {
			return b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: "sandboxes/s1", Writable: true}, r)
		})
	if !errors.Is(recvErr, nodeapi.ErrExists) {
		t.Fatalf("receive over an existing volume: %v, want ErrExists", recvErr)
	}

	for _, name := range []string{"../x", "/abs", "a//b", ""} {
		if err := a.SendVolume(ctx, name, io.Discard); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("SendVolume(%q): %v, want ErrInvalidName", name, err)
		}
		if err := b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: name}, strings.NewReader("")); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("ReceiveVolume(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if err := b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: "sandboxes/s2", DiskMB: -1}, strings.NewReader("")); err == nil {
		t.Error("negative disk limit accepted")
	}
	err = a.SendVolume(ctx, "sandboxes/missing", io.Discard)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("send of a missing volume: %v, want ErrNotExist", err)
	}
	if err != nil && strings.Contains(err.Error(), poolA.Root()) {
		t.Errorf("error names a host path: %v", err)
	}
}

func TestTransferVolumeNeedsBtrfs(t *testing.T) {
	pool, err := storage.Open(context.Background(), storage.Options{Root: t.TempDir(), ForceCopy: true})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{ImagesDir: t.TempDir(), Volumes: pool}, log: slog.Default()}
	if _, err := pool.Create("templates/t1"); err != nil {
		t.Fatal(err)
	}
	if err := n.SendVolume(context.Background(), "templates/t1", io.Discard); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("send on a copy pool: %v, want ErrUnsupported", err)
	}
}

// mkCheckpoint makes a checkpoint image as a suspend leaves it.
func mkCheckpoint(t *testing.T, n *Node, name string, complete bool) string {
	t.Helper()
	dir, err := n.imagePath(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	pages := bytes.Repeat([]byte("page"), 1<<18)
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("kernel state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if complete {
		if err := markComplete(dir); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func imageNode(t *testing.T) *Node {
	return &Node{cfg: Config{ImagesDir: filepath.Join(t.TempDir(), "images")}, log: slog.Default()}
}

func TestTransferImageBetweenNodes(t *testing.T) {
	a, b := imageNode(t), imageNode(t)
	ctx := context.Background()
	const name = "sb1/snapshots/snap1"
	src := mkCheckpoint(t, a, name, true)

	sendErr, recvErr := streamPipe(
		func(w io.Writer) error { return a.SendImage(ctx, name, w) },
		func(r io.Reader) error { return b.ReceiveImage(ctx, name, r) })
	if sendErr != nil || recvErr != nil {
		t.Fatalf("send: %v, receive: %v", sendErr, recvErr)
	}
	dst, _ := b.imagePath(name)
	if !hasCompleteMarker(dst) {
		t.Fatal("received image is not complete")
	}
	for _, f := range []string{"pages.img", "checkpoint.img"} {
		want, _ := os.ReadFile(filepath.Join(src, f))
		got, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d", f, len(got), err, len(want))
		}
	}

	// The same image again is refused, and the one there stays whole.
	var stream bytes.Buffer
	if err := a.SendImage(ctx, name, &stream); err != nil {
		t.Fatal(err)
	}
	if err := b.ReceiveImage(ctx, name, bytes.NewReader(stream.Bytes())); !errors.Is(err, nodeapi.ErrExists) {
		t.Fatalf("receive over an existing image: %v, want ErrExists", err)
	}
	if !hasCompleteMarker(dst) {
		t.Fatal("existing image damaged by a refused receive")
	}

	// A stream cut short leaves neither an image nor its scratch dir, nor
	// the directories made for it.
	c := imageNode(t)
	for _, cut := range []int{0, 512, stream.Len() / 2, stream.Len() - 1024 - 512} {
		err := c.ReceiveImage(ctx, name, bytes.NewReader(stream.Bytes()[:cut]))
		if err == nil {
			t.Fatalf("stream cut at %d of %d received", cut, stream.Len())
		}
		t.Logf("cut at %d: %v", cut, err)
		if entries, _ := os.ReadDir(c.cfg.ImagesDir); len(entries) != 0 {
			t.Fatalf("stream cut at %d left %d entries", cut, len(entries))
		}
	}

	// An incomplete image is not sent; names outside checkpoint images
	// are refused.
	mkCheckpoint(t, a, "sb2/suspend", false)
	if err := a.SendImage(ctx, "sb2/suspend", io.Discard); err == nil || !strings.Contains(err.Error(), "not complete") {
		t.Fatalf("send of an incomplete image: %v", err)
	}
	if err := a.SendImage(ctx, "sb3/suspend", io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("send of a missing image: %v, want ErrNotExist", err)
	}
	for _, bad := range []string{"../x", "/abs", "templates/t1", "sb1/suspend.partial", ""} {
		if err := a.SendImage(ctx, bad, io.Discard); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("SendImage(%q): %v, want ErrInvalidName", bad, err)
		}
		if err := b.ReceiveImage(ctx, bad, bytes.NewReader(stream.Bytes())); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("ReceiveImage(%q): %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestReceiveImageRefusesHostileStreams(t *testing.T) {
	ctx := context.Background()
	tarOf := func(hdrs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(make([]byte, h.Size))
			}
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	marker := &tar.Header{Name: completeMarker, Typeflag: tar.TypeReg, Mode: 0o600}
	cases := map[string][]byte{
		"escape":    tarOf(&tar.Header{Name: "../../escape", Typeflag: tar.TypeReg, Mode: 0o600, Size: 1}, marker),
		"absolute":  tarOf(&tar.Header{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o600, Size: 1}, marker),
		"symlink":   tarOf(&tar.Header{Name: "pages.img", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}, marker),
		"no marker": tarOf(&tar.Header{Name: "pages.img", Typeflag: tar.TypeReg, Mode: 0o600, Size: 10}),
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			n := imageNode(t)
			err := n.ReceiveImage(ctx, "sb1/suspend", bytes.NewReader(stream))
			if err == nil {
				t.Fatal("received")
			}
			t.Logf("refused: %v", err)
			if strings.Contains(err.Error(), n.cfg.ImagesDir) {
				t.Fatalf("error names a host path: %v", err)
			}
			if entries, _ := os.ReadDir(n.cfg.ImagesDir); len(entries) != 0 {
				t.Fatalf("refused stream left %d entries", len(entries))
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(n.cfg.ImagesDir), "escape")); err == nil {
				t.Fatal("an entry escaped the images directory")
			}
		})
	}
}
