package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
}

func makeTar(t *testing.T, entries []tarEntry, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	} else {
		w = tar.NewWriter(&buf)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Uid: e.uid, Gid: e.uid,
			Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := w.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			w.Write([]byte(e.body))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// The two layers exercise whiteouts, opaque directories, replacement,
// links, ownership and setuid bits.
func testLayers(t *testing.T) (lower, upper []byte) {
	lower = makeTar(t, []tarEntry{
		{name: "bin/", typ: tar.TypeDir},
		{name: "bin/sh", body: "#!fake shell\n", mode: 0o755},
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/keep", body: "kept"},
		{name: "etc/remove-me", body: "gone soon"},
		{name: "opq/", typ: tar.TypeDir},
		{name: "opq/old", body: "lower"},
		{name: "opq/olddir/", typ: tar.TypeDir},
		{name: "opq/olddir/f", body: "lower"},
		{name: "replaced", body: "file in lower"},
		{name: "home/app/", typ: tar.TypeDir, uid: 1000},
		{name: "home/app/owned", body: "mine", uid: 1000},
	}, false)
	upper = makeTar(t, []tarEntry{
		{name: "etc/.wh.remove-me", body: ""},
		{name: "opq/", typ: tar.TypeDir},
		{name: "opq/new", body: "upper"},
		{name: "opq/.wh..wh..opq", body: ""},
		{name: "replaced/", typ: tar.TypeDir},
		{name: "usr/bin/", typ: tar.TypeDir},
		{name: "usr/bin/su", body: "setuid", mode: 0o4755},
		{name: "usr/bin/link-to-keep", typ: tar.TypeSymlink, link: "../../etc/keep"},
		{name: "usr/bin/hard", typ: tar.TypeLink, link: "etc/keep"},
	}, true)
	return lower, upper
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// writeOCILayout writes a complete OCI image layout directory.
func writeOCILayout(t *testing.T, dir string, layers [][]byte, config map[string]any) {
	t.Helper()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(data []byte) string {
		d := sha(data)
		if err := os.WriteFile(filepath.Join(blobs, d), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + d
	}
	configData, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": config})
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(configData), "size": len(configData)},
	}
	var ls []map[string]any
	for _, l := range layers {
		ls = append(ls, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(l), "size": len(l)})
	}
	manifest["layers"] = ls
	manifestData, _ := json.Marshal(manifest)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []map[string]any{{"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest": put(manifestData), "size": len(manifestData)}},
	})
	os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

func checkImportedTree(t *testing.T, root string) {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return err == nil }
	if read("etc/keep") != "kept" || exists("etc/remove-me") || exists("etc/.wh.remove-me") {
		t.Errorf("whiteout: keep=%q remove-me exists=%v", read("etc/keep"), exists("etc/remove-me"))
	}
	if read("opq/new") != "upper" || exists("opq/old") || exists("opq/olddir") || exists("opq/.wh..wh..opq") {
		t.Errorf("opaque dir: new=%q old=%v olddir=%v", read("opq/new"), exists("opq/old"), exists("opq/olddir"))
	}
	if info, err := os.Lstat(filepath.Join(root, "replaced")); err != nil || !info.IsDir() {
		t.Errorf("file replaced by dir: %v", err)
	}
	if info, err := os.Stat(filepath.Join(root, "usr/bin/su")); err != nil || info.Mode()&os.ModeSetuid == 0 {
		t.Errorf("setuid lost: %v", err)
	}
	if target, _ := os.Readlink(filepath.Join(root, "usr/bin/link-to-keep")); target != "../../etc/keep" {
		t.Errorf("symlink target %q", target)
	}
	a, _ := os.Stat(filepath.Join(root, "usr/bin/hard"))
	b, _ := os.Stat(filepath.Join(root, "etc/keep"))
	if a == nil || b == nil || a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Error("hard link not preserved")
	}
	if info, err := os.Stat(filepath.Join(root, "home/app/owned")); err != nil || info.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("ownership lost: %v", err)
	}
	if !exists(".space") || !exists("tmp") {
		t.Error("finalize did not create /.space and /tmp")
	}
}

func TestOCILayoutImport(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	lower, upper := testLayers(t)
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{lower, upper}, map[string]any{
		"Env": []string{"PATH=/usr/bin:/bin", "FROM_IMAGE=yes"}, "User": "1000", "WorkingDir": "/home/app",
	})
	tpl, progress := e.build(t, "oci", mustParse(t, "from: oci-layout:img\nenv: {EXTRA: '1'}\n"), dir)
	if !strings.Contains(progress, "(2 layers)") {
		t.Errorf("progress:\n%s", progress)
	}
	if tpl.Env["FROM_IMAGE"] != "yes" || tpl.Env["EXTRA"] != "1" || tpl.User != "1000" || tpl.Workdir != "/home/app" {
		t.Fatalf("image config not applied: %+v", tpl)
	}
	checkImportedTree(t, e.rootfs(tpl))

	// Recipe fields override the image config.
	tpl2, _ := e.build(t, "oci2", mustParse(t, "from: oci-layout:img\nuser: root\nworkdir: /\n"), dir)
	if tpl2.User != "root" || tpl2.Workdir != "/" || tpl2.ID == tpl.ID {
		t.Fatalf("override: %+v", tpl2)
	}
}

func TestDockerSaveArchive(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	lower, upper := testLayers(t)
	config, _ := json.Marshal(map[string]any{"config": map[string]any{"Env": []string{"A=b"}, "WorkingDir": "/srv"}})
	manifest, _ := json.Marshal([]map[string]any{{
		"Config": "cfg.json", "RepoTags": []string{"test:latest"},
		"Layers": []string{"l1/layer.tar", "l2/layer.tar"},
	}})
	archive := makeTar(t, []tarEntry{
		{name: "l1/", typ: tar.TypeDir}, {name: "l1/layer.tar", body: string(lower)},
		{name: "l2/", typ: tar.TypeDir}, {name: "l2/layer.tar", body: string(upper)},
		{name: "cfg.json", body: string(config)},
		{name: "manifest.json", body: string(manifest)},
	}, false)
	if err := os.WriteFile(filepath.Join(dir, "image.tar"), archive, 0o644); err != nil {
		t.Fatal(err)
	}
	tpl, _ := e.build(t, "docker", mustParse(t, "from: oci-archive:image.tar\n"), dir)
	if tpl.Env["A"] != "b" || tpl.Workdir != "/srv" || tpl.User != "" {
		t.Fatalf("image config: %+v", tpl)
	}
	checkImportedTree(t, e.rootfs(tpl))
}

func TestOCIRefusesEscapes(t *testing.T) {
	e := newTestEnv(t)
	outside := t.TempDir()
	cases := map[string][]tarEntry{
		"dotdot": {{name: "../../escaped", body: "x"}},
		"symlink": {
			{name: "esc", typ: tar.TypeSymlink, link: outside},
			{name: "esc/escaped", body: "x"},
		},
		"relative symlink": {
			{name: "up", typ: tar.TypeSymlink, link: "../../../../../../../../" + outside},
			{name: "up/escaped", body: "x"},
		},
		"hardlink through a symlink": {
			{name: "hostdir", typ: tar.TypeSymlink, link: outside},
			{name: "pw", typ: tar.TypeLink, link: "hostdir/host-file"},
		},
		"hardlink climbing out": {{name: "pw", typ: tar.TypeLink, link: "../../../../../../.." + outside + "/host-file"}},
		"absolute symlink as a parent": {
			{name: "etc", typ: tar.TypeSymlink, link: outside},
			{name: "etc/escaped", body: "x"},
		},
	}
	os.WriteFile(filepath.Join(outside, "host-file"), []byte("host"), 0o644)
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{makeTar(t, entries, false)}, nil)
			_, err := e.m.Build(context.Background(), "evil", mustParse(t, "from: oci-layout:img\n"), Source{Dir: dir, HostPaths: true}, nil)
			if err == nil {
				t.Fatal("escaping layer was accepted")
			}
			if _, serr := os.Stat(filepath.Join(outside, "escaped")); serr == nil {
				t.Fatal("layer wrote outside the rootfs")
			}
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(outside, "host-file"), &st) == nil && st.Nlink != 1 {
				t.Fatalf("the host file got %d links", st.Nlink)
			}
			t.Logf("refused: %v", err)
		})
	}
}
