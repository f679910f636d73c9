package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/space-platform/space/internal/template/registrytest"
)

// gzipBomb is a gzipped layer of one file of size zero bytes: a few
// tens of KiB that unpack to size.
func gzipBomb(t *testing.T, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zeros)) {
		if _, err := tw.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// diskBytes sums the sizes of the files below dir.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// countEntries counts what is below dir.
func countEntries(dir string) int {
	n := -1 // dir itself
	filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil })
	return n
}

// A small compressed layer that unpacks to far more than the budget is
// stopped at the budget, not when it is all on disk.
func TestUnpackStopsAGzipBomb(t *testing.T) {
	const limit = 1 << 20
	bomb := gzipBomb(t, 64<<20)
	t.Logf("layer: %d bytes compressed, 64 MiB unpacked", len(bomb))
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{bomb}, nil)
	img, err := resolveImage(FromOCILayout, filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	budget := &unpackBudget{limit: limit, what: "the test's limit", maxEntries: maxImageEntries}
	err = unpackImage(img, rootfs, budget, func(l string) { t.Log(l) })
	if !errors.Is(err, ErrImageTooLarge) || !strings.Contains(err.Error(), "more than 1.0 MiB, the test's limit") {
		t.Fatalf("unpack: %v, want ErrImageTooLarge naming the limit", err)
	}
	if got := diskBytes(t, rootfs); got > limit {
		t.Errorf("%d bytes written, more than the %d the budget allows", got, limit)
	}
	if budget.read > limit+1 {
		t.Errorf("%d bytes decompressed, more than the budget (%d) and the byte that tells it is passed", budget.read, limit)
	}

	// The same image within its budget unpacks.
	if err := unpackImage(img, t.TempDir(), &unpackBudget{limit: 65 << 20, maxEntries: maxImageEntries}, func(l string) { t.Log(l) }); err != nil {
		t.Errorf("within the budget: %v", err)
	}
}

// A layer of many empty files costs little of any byte budget; the
// entries are bounded of their own.
func TestUnpackBoundsEntries(t *testing.T) {
	var entries []tarEntry
	for i := range 50 {
		entries = append(entries, tarEntry{name: fmt.Sprintf("f%d", i)})
	}
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{makeTar(t, entries, true)}, nil)
	img, err := resolveImage(FromOCILayout, filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	err = unpackImage(img, rootfs, &unpackBudget{limit: 1 << 30, maxEntries: 20}, func(l string) { t.Log(l) })
	if !errors.Is(err, ErrImageTooLarge) || !strings.Contains(err.Error(), "more than 20 entries") {
		t.Fatalf("unpack: %v, want ErrImageTooLarge naming the entry bound", err)
	}
	if n := countEntries(rootfs); n > 20 {
		t.Errorf("%d entries made, more than the 20 allowed", n)
	}
}

// A build from an image that unpacks past the build's disk limit, or past
// what is left of its project's template disk quota, fails with that
// said, and leaves no volume behind.
func TestBuildStopsAnImagePastItsDiskLimit(t *testing.T) {
	e := newTestEnv(t)
	e.m.Close()
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf, Sandboxes: e.boxes,
		BuildDiskBytes: 2 << 20, Registry: RegistryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	bomb := gzipBomb(t, 64<<20)
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{bomb}, nil)
	reg := registrytest.Start(t, "user", "secret")
	reg.Push(t, "bomb:1", [][]byte{bomb}, v1.Config{})
	creds := &RegistryAuth{Username: "user", Password: "secret"}

	for _, c := range []struct {
		name, recipe string
		src          Source
		want         string
	}{
		{"archive", "from: oci-layout:img\n", Source{Dir: dir, HostPaths: true}, "more than 2.0 MiB, the disk limit of a build"},
		{"archive-quota", "from: oci-layout:img\n", Source{Dir: dir, HostPaths: true, DiskQuotaBytes: 1 << 20},
			"more than 1.0 MiB, what is left of the project's template disk quota"},
		{"pull", "from: image:" + reg.Host + "/bomb:1\n", Source{Registry: creds}, "more than 2.0 MiB, the disk limit of a build"},
		{"pull-quota", "from: image:" + reg.Host + "/bomb:1\n", Source{Registry: creds, DiskQuotaBytes: 1 << 10},
			"compressed layers alone are"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.m.Build(context.Background(), c.name, mustParse(t, c.recipe), c.src, nil)
			// A failed build's error carries its reason as text.
			if err == nil || !strings.Contains(err.Error(), ErrImageTooLarge.Error()) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("build: %v, want it too large: %q", err, c.want)
			}
			if vols, _ := e.pool.List("templates"); len(vols) != 0 {
				t.Errorf("volumes left behind: %v", vols)
			}
		})
	}
}
