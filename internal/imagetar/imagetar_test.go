package imagetar

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mkFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	pages := make([]byte, 3<<20+17)
	if _, err := rand.Read(pages); err != nil {
		t.Fatal(err)
	}
	mkFile(t, filepath.Join(src, "pages.img"), pages)
	mkFile(t, filepath.Join(src, "checkpoint.img"), []byte("state"))
	mkFile(t, filepath.Join(src, "sub", "nested.img"), []byte("nested"))
	mkFile(t, filepath.Join(src, "empty"), nil)
	mkFile(t, filepath.Join(src, "a-marker"), nil)

	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, src, "a-marker"); err != nil {
		t.Fatal(err)
	}
	// The marker comes last although it sorts first.
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if got := strings.Join(names, ","); got != "checkpoint.img,empty,pages.img,sub/,sub/nested.img,a-marker" {
		t.Fatalf("archive order: %s", got)
	}

	dst := t.TempDir()
	if err := Extract(context.Background(), bytes.NewReader(buf.Bytes()), dst, 0); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"pages.img", "checkpoint.img", "sub/nested.img", "empty", "a-marker"} {
		want, _ := os.ReadFile(filepath.Join(src, rel))
		got, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d bytes", rel, len(got), err, len(want))
		}
	}

	// A missing last file is an error: the image is not whole.
	if err := Write(context.Background(), io.Discard, src, "space-complete"); err == nil {
		t.Fatal("archived a directory without its last file")
	}
}

func TestWriteRefusesWhatNoImageHolds(t *testing.T) {
	src := t.TempDir()
	mkFile(t, filepath.Join(src, "pages.img"), []byte("x"))
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	err := Write(context.Background(), io.Discard, src, "")
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("archived a symlink: %v", err)
	}
	if strings.Contains(err.Error(), src) {
		t.Fatalf("error names a host path: %v", err)
	}
}

// archive builds a tar from headers; a regular entry's body is its Size
// of 'x'.
func archive(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(0, 0)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name string, size int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	outside := t.TempDir()
	good, _ := os.ReadDir(outside)
	many := make([]*tar.Header, maxEntries+1)
	for i := range many {
		// Directories: files are synced one by one, which takes long.
		many[i] = &tar.Header{Name: "d" + strconv.Itoa(i) + "/", Typeflag: tar.TypeDir, Mode: 0o755}
	}
	full := archive(t, reg("pages.img", 4096))
	cases := map[string]struct {
		data []byte
		max  int64
	}{
		"dotdot":             {data: archive(t, reg("../escape", 1))},
		"nested dotdot":      {data: archive(t, reg("a/../../escape", 1))},
		"absolute":           {data: archive(t, reg("/tmp/escape", 1))},
		"dot":                {data: archive(t, reg(".", 1))},
		"backslash":          {data: archive(t, reg(`..\escape`, 1))},
		"symlink":            {data: archive(t, &tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: outside})},
		"symlink then write": {data: archive(t, &tar.Header{Name: "d", Typeflag: tar.TypeSymlink, Linkname: outside}, reg("d/escape", 1))},
		"hard link":          {data: archive(t, reg("a", 1), &tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"})},
		"device":             {data: archive(t, &tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3})},
		"fifo":               {data: archive(t, &tar.Header{Name: "fifo", Typeflag: tar.TypeFifo})},
		"duplicate":          {data: archive(t, reg("a", 1), reg("a", 2))},
		"oversize":           {data: archive(t, reg("a", 600), reg("b", 600)), max: 1000},
		"too many entries":   {data: archive(t, many...)},
		"truncated":          {data: full[:1024]},
		"garbage":            {data: bytes.Repeat([]byte{0xff}, 2048)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			err := Extract(context.Background(), bytes.NewReader(c.data), dst, c.max)
			if err == nil {
				t.Fatal("extracted")
			}
			t.Logf("refused: %v", err)
			if strings.Contains(err.Error(), dst) {
				t.Fatalf("error names a host path: %v", err)
			}
			if got, _ := os.ReadDir(outside); len(got) != len(good) {
				t.Fatal("an entry landed outside the target")
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "escape")); err == nil {
				t.Fatal("an entry landed next to the target")
			}
		})
	}
	// Exactly at the bound passes.
	if err := Extract(context.Background(), bytes.NewReader(archive(t, reg("a", 500), reg("b", 500))), t.TempDir(), 1000); err != nil {
		t.Fatalf("archive at the bound: %v", err)
	}
}

func TestExtractStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Extract(ctx, bytes.NewReader(archive(t, reg("a", 10))), t.TempDir(), 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Extract after cancel: %v", err)
	}
}
