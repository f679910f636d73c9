// Command ociimage writes a container image archive from layer tarballs,
// without Docker or a registry: the images space needs on a machine that
// can reach no registry are assembled from files built here.
//
// The archive is an OCI image layout (oci-layout, index.json, blobs/) that
// also carries a Docker-style manifest.json pointing at the same blobs, the
// shape `docker save` writes since Docker 25. Each consumer reads the half
// it knows: `ctr images import` and skopeo's oci-archive: read index.json,
// `kind load image-archive` and `crane push` read manifest.json. Blobs are
// stored once.
//
// Usage:
//
//	ociimage -o OUT.tar --tag REF [--tag REF]... --layer L.tar[.gz]... \
//	    [--entrypoint ARG]... [--cmd ARG]... [--env K=V]... [--workdir DIR] \
//	    [--user U] [--expose 5432/tcp] [--volume DIR] [--stop-signal SIG] \
//	    [--label K=V]...
//
// Layers are applied in the order given. A gzip-compressed layer is stored
// as it is; an uncompressed one is compressed once into a temporary file.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	out, workdir, user, stopSignal string
	tags, layers, entrypoint, cmd  list
	env, expose, volumes, labels   list
}

func main() {
	var o options
	flag.StringVar(&o.out, "o", "", "output archive (required)")
	flag.Var(&o.tags, "tag", "image reference, e.g. docker.io/library/postgres:15 (repeatable, at least one)")
	flag.Var(&o.layers, "layer", "layer tarball, .tar or .tar.gz (repeatable, bottom first)")
	flag.Var(&o.entrypoint, "entrypoint", "one entrypoint argument (repeatable)")
	flag.Var(&o.cmd, "cmd", "one default command argument (repeatable)")
	flag.Var(&o.env, "env", "K=V environment entry (repeatable)")
	flag.Var(&o.expose, "expose", "exposed port such as 5432/tcp (repeatable)")
	flag.Var(&o.volumes, "volume", "volume path (repeatable)")
	flag.Var(&o.labels, "label", "K=V image label (repeatable)")
	flag.StringVar(&o.workdir, "workdir", "", "working directory")
	flag.StringVar(&o.user, "user", "", "user the container runs as")
	flag.StringVar(&o.stopSignal, "stop-signal", "", "signal that stops the container")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s ociimage: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(o options) error {
	if o.out == "" || len(o.tags) == 0 || len(o.layers) == 0 {
		return errors.New("-o, at least one --tag and at least one --layer are required")
	}
	for _, t := range o.tags {
		if !strings.Contains(t, ":") || strings.HasSuffix(t, ":") {
			return fmt.Errorf("tag %q: want a full reference with a tag, e.g. docker.io/library/busybox:1.35", t)
		}
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(o.out), ".ociimage-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(tmpDir)

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, p := range o.layers {
		gz, err := gzipped(p, filepath.Join(tmpDir, fmt.Sprintf("layer%d.tar.gz", i)))
		if err != nil {
			return err
		}
		l, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", p, err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return fmt.Errorf("append layer %s: %w", p, err)
		}
		d, _ := l.Digest()
		sz, _ := l.Size()
		logf("layer %s: %s, %.1f MiB compressed", filepath.Base(p), d, float64(sz)/(1<<20))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = o.entrypoint
	cf.Config.Cmd = o.cmd
	cf.Config.Env = o.env
	if !hasPath(o.env) {
		cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, o.env...)
	}
	cf.Config.WorkingDir = o.workdir
	cf.Config.User = o.user
	cf.Config.StopSignal = o.stopSignal
	cf.Config.ExposedPorts = set(o.expose)
	cf.Config.Volumes = set(o.volumes)
	if len(o.labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, kv := range o.labels {
			k, v, _ := strings.Cut(kv, "=")
			cf.Config.Labels[k] = v
		}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	if err := writeArchive(img, o.tags, o.out); err != nil {
		return err
	}
	st, err := os.Stat(o.out)
	if err != nil {
		return err
	}
	d, _ := img.Digest()
	logf("wrote %s (%s, %.1f MiB) as %s", o.out, d, float64(st.Size())/(1<<20), strings.Join(o.tags, ", "))
	return nil
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}

func set(keys []string) map[string]struct{} {
	if len(keys) == 0 {
		return nil
	}
	m := map[string]struct{}{}
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// gzipped returns p if it is gzip-compressed, or compresses it into tmp:
// once, so that the layer digest and the blob written come from one pass.
func gzipped(p, tmp string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("layer: %w", err)
	}
	defer f.Close()
	magic := make([]byte, 2)
	if _, err := io.ReadFull(f, magic); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		return p, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	out, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("compress %s: %w", p, err)
	}
	defer out.Close()
	zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if _, err := io.Copy(zw, f); err != nil {
		return "", fmt.Errorf("compress %s: %w", p, err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("compress %s: %w", p, err)
	}
	return tmp, out.Close()
}

// dockerManifest is one entry of a docker-archive manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// writeArchive writes img as an OCI layout tar with a Docker manifest.json.
// It writes to a temporary name and renames, so a reader never sees half
// an archive and an interrupted build leaves the previous one in place.
func writeArchive(img v1.Image, tags []string, out string) error {
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create archive: %w", err)
	}
	defer os.Remove(tmp)
	defer f.Close()
	tw := tar.NewWriter(f)

	blobPath := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	addBytes := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: blobPath(d), Mode: 0o644, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			rc.Close()
			return err
		}
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("write layer %s: %w", d, err)
		}
		layerPaths = append(layerPaths, blobPath(d))
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := addBytes(blobPath(cfgName), rawCfg); err != nil {
		return err
	}
	rawMf, err := img.RawManifest()
	if err != nil {
		return err
	}
	mfDigest, err := img.Digest()
	if err != nil {
		return err
	}
	if err := addBytes(blobPath(mfDigest), rawMf); err != nil {
		return err
	}

	// One index entry per tag, annotated the way containerd and Docker do:
	// io.containerd.image.name carries the full reference (what
	// `ctr images import` names the image), org.opencontainers.image.ref.name
	// the tag (what skopeo's oci-archive:FILE:TAG selects).
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, t := range tags {
		idx.Manifests = append(idx.Manifests, v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Digest:    mfDigest,
			Size:      int64(len(rawMf)),
			Platform:  &v1.Platform{OS: "linux", Architecture: "amd64"},
			Annotations: map[string]string{
				"io.containerd.image.name":          t,
				"org.opencontainers.image.ref.name": t[strings.LastIndex(t, ":")+1:],
			},
		})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(idx); err != nil {
		return err
	}
	if err := addBytes("index.json", buf.Bytes()); err != nil {
		return err
	}
	dm, err := json.Marshal([]dockerManifest{{Config: blobPath(cfgName), RepoTags: tags, Layers: layerPaths}})
	if err != nil {
		return err
	}
	if err := addBytes("manifest.json", dm); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("finish archive: %w", err)
	}
	return os.Rename(tmp, out)
}
