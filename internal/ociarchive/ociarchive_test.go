package ociarchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// archiveOf writes an archive of the shape scripts/image.sh writes, with
// the given layers; corrupt, when set, edits the files before they are
// written (blob path -> content, "" deletes).
func archiveOf(t *testing.T, layers [][]entry, corrupt func(files map[string][]byte)) string {
	t.Helper()
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}
	var cfg Config
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = []string{"/bin/app"}
	cfg.RootFS.Type = "layers"
	var m Manifest
	m.SchemaVersion, m.MediaType = 2, "application/vnd.oci.image.manifest.v1+json"
	var dm DockerManifest
	for _, l := range layers {
		raw := tarOf(t, l)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(raw)
		zw.Close()
		d := Descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: digest(gz.Bytes()), Size: int64(gz.Len())}
		files[blobPath(d.Digest)] = gz.Bytes()
		m.Layers = append(m.Layers, d)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, digest(raw))
		dm.Layers = append(dm.Layers, blobPath(d.Digest))
	}
	cb, _ := json.Marshal(cfg)
	m.Config = Descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(cb), Size: int64(len(cb))}
	files[blobPath(m.Config.Digest)] = cb
	mb, _ := json.Marshal(m)
	files[blobPath(digest(mb))] = mb
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []Descriptor{{
		MediaType: m.MediaType, Digest: digest(mb), Size: int64(len(mb)),
		Annotations: map[string]string{"io.containerd.image.name": "example.com/app:1", "org.opencontainers.image.ref.name": "1"},
	}}})
	files["index.json"] = idx
	dm.Config, dm.RepoTags = blobPath(m.Config.Digest), []string{"example.com/app:1"}
	db, _ := json.Marshal([]DockerManifest{dm})
	files["manifest.json"] = db
	if corrupt != nil {
		corrupt(files)
	}
	var es []entry
	for name, b := range files {
		if b != nil {
			es = append(es, entry{name: name, body: string(b)})
		}
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, tarOf(t, es), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var twoLayers = [][]entry{
	{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		{name: "usr/bin/app", body: "#!/bin/sh\necho app\n", mode: 0o755},
		{name: "usr/bin/app-alias", typ: tar.TypeLink, link: "usr/bin/app"},
		{name: "etc/old/conf", body: "old"},
		{name: "etc/keep", body: "keep"},
	},
	{
		{name: "etc/.wh.old", body: ""},
		{name: "usr/bin/tool", body: "tool", mode: 0o700},
	},
}

func TestOpen(t *testing.T) {
	img, err := Open(archiveOf(t, twoLayers, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Refs) != 1 || img.Refs[0] != "example.com/app:1" {
		t.Errorf("refs %v", img.Refs)
	}
	if got := img.Config.Config.Entrypoint; len(got) != 1 || got[0] != "/bin/app" {
		t.Errorf("entrypoint %v", got)
	}
}

func TestRefusesBrokenArchives(t *testing.T) {
	cases := map[string]struct {
		corrupt func(map[string][]byte)
		want    string
	}{
		"no oci-layout":    {func(f map[string][]byte) { f["oci-layout"] = nil }, "oci-layout"},
		"no index.json":    {func(f map[string][]byte) { f["index.json"] = nil }, "index.json"},
		"no manifest.json": {func(f map[string][]byte) { f["manifest.json"] = nil }, "manifest.json"},
		"manifest.json names another config": {func(f map[string][]byte) {
			f["manifest.json"] = []byte(`[{"Config":"blobs/sha256/00","RepoTags":["x:1"],"Layers":[]}]`)
		}, "manifest.json config"},
		"layer blob changed": {func(f map[string][]byte) {
			for k, v := range f {
				if len(v) > 2 && v[0] == 0x1f && v[1] == 0x8b {
					f[k] = append(v[:len(v):len(v)], 0)
					return
				}
			}
		}, "blob content has digest"},
		"layer blob missing": {func(f map[string][]byte) {
			for k, v := range f {
				if len(v) > 2 && v[0] == 0x1f && v[1] == 0x8b {
					f[k] = nil
					return
				}
			}
		}, "is missing"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Open(archiveOf(t, twoLayers, c.corrupt))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}
