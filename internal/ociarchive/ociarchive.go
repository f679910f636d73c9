// Package ociarchive reads the container image archives scripts/image.sh
// writes: an OCI image layout in one tar (oci-layout, index.json,
// blobs/sha256/...) that also carries a docker-archive manifest.json. It
// reads the image's references, manifest and config and unpacks the
// layers into a directory, checking every blob against its digest, so a
// test can look inside an image without a container runtime. It knows tar
// and JSON only; the main module does not depend on an image library.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Descriptor points at a blob (OCI image spec).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is the part of an OCI image config a runtime acts on.
type Config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		User       string            `json:"User"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// DockerManifest is one entry of a docker-archive manifest.json.
type DockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Image is the first image of an archive.
type Image struct {
	path string
	// Refs are the references index.json names the image by
	// (io.containerd.image.name), in order.
	Refs     []string
	Manifest Manifest
	Config   Config
	// Docker is manifest.json's entry for the same image.
	Docker DockerManifest
}

// smallFileMax bounds the JSON files Open keeps in memory.
const smallFileMax = 4 << 20

// Open reads the index, manifest, config and manifest.json of the archive
// at p and checks that both halves describe the same blobs.
func Open(p string) (*Image, error) {
	small := map[string][]byte{}
	err := walk(p, func(h *tar.Header, r io.Reader) error {
		if h.Typeflag == tar.TypeReg && h.Size <= smallFileMax {
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			small[path.Clean(h.Name)] = b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, ok := small["oci-layout"]; !ok {
		return nil, fmt.Errorf("%s: no oci-layout file: not an OCI image layout", p)
	}
	var idx struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := unmarshal(small, "index.json", &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(idx.Manifests) == 0 {
		return nil, fmt.Errorf("%s: index.json lists no manifest", p)
	}
	img := &Image{path: p}
	for _, m := range idx.Manifests {
		if m.Digest != idx.Manifests[0].Digest {
			return nil, fmt.Errorf("%s: index.json holds more than one image (%s, %s)", p, idx.Manifests[0].Digest, m.Digest)
		}
		if ref := m.Annotations["io.containerd.image.name"]; ref != "" {
			img.Refs = append(img.Refs, ref)
		}
	}
	if err := unmarshalBlob(small, idx.Manifests[0], &img.Manifest); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", p, err)
	}
	if err := unmarshalBlob(small, img.Manifest.Config, &img.Config); err != nil {
		return nil, fmt.Errorf("%s: config: %w", p, err)
	}
	var docker []DockerManifest
	if err := unmarshal(small, "manifest.json", &docker); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(docker) != 1 {
		return nil, fmt.Errorf("%s: manifest.json has %d entries, want 1", p, len(docker))
	}
	img.Docker = docker[0]
	if img.Docker.Config != blobPath(img.Manifest.Config.Digest) {
		return nil, fmt.Errorf("%s: manifest.json config %s is not the OCI manifest's %s", p, img.Docker.Config, img.Manifest.Config.Digest)
	}
	if len(img.Docker.Layers) != len(img.Manifest.Layers) {
		return nil, fmt.Errorf("%s: manifest.json lists %d layers, the OCI manifest %d", p, len(img.Docker.Layers), len(img.Manifest.Layers))
	}
	for i, l := range img.Manifest.Layers {
		if img.Docker.Layers[i] != blobPath(l.Digest) {
			return nil, fmt.Errorf("%s: manifest.json layer %d is %s, the OCI manifest's %s", p, i, img.Docker.Layers[i], l.Digest)
		}
	}
	if len(img.Config.RootFS.DiffIDs) != len(img.Manifest.Layers) {
		return nil, fmt.Errorf("%s: config has %d diff_ids for %d layers", p, len(img.Config.RootFS.DiffIDs), len(img.Manifest.Layers))
	}
	return img, nil
}

// Unpack applies the layers in order under dir, which should be empty:
// directories, regular files, symlinks and hard links with their modes and
// (when run as root) owners; whiteouts remove what a lower layer made.
// Device nodes are skipped: a runtime mounts its own /dev. No entry may
// leave dir, through its name or through a symlink a lower entry made.
func (img *Image) Unpack(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()
	asRoot := os.Geteuid() == 0
	return img.layers(func(h *tar.Header, name string, r io.Reader) error {
		d, base := path.Split(name)
		d = strings.TrimSuffix(d, "/")
		if d == "" {
			d = "."
		}
		if base == ".wh..wh..opq" {
			entries, err := fs.ReadDir(root.FS(), d)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := root.RemoveAll(path.Join(d, e.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		if strings.HasPrefix(base, ".wh.") {
			return root.RemoveAll(path.Join(d, strings.TrimPrefix(base, ".wh.")))
		}
		// A layer need not list a file's parents before it.
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			if err := root.Chmod(name, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		case tar.TypeReg:
			_ = root.RemoveAll(name)
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := root.Chmod(name, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.RemoveAll(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			_ = root.RemoveAll(name)
			if err := root.Link(target, name); err != nil {
				return err
			}
		default:
			return nil // devices, fifos: nothing a test needs
		}
		if asRoot {
			if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		return nil
	})
}

// layers calls fn for every entry of every layer, bottom first, with a
// clean relative name, after checking each layer's digest and diff ID.
func (img *Image) layers(fn func(h *tar.Header, name string, r io.Reader) error) error {
	for i, l := range img.Manifest.Layers {
		found := false
		err := walk(img.path, func(h *tar.Header, r io.Reader) error {
			if path.Clean(h.Name) != blobPath(l.Digest) {
				return nil
			}
			found = true
			if err := applyLayer(r, l, img.Config.RootFS.DiffIDs[i], fn); err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%s: layer %d blob %s is missing", img.path, i, l.Digest)
		}
	}
	return nil
}

func applyLayer(blob io.Reader, l Descriptor, diffID string, fn func(*tar.Header, string, io.Reader) error) error {
	compressed := sha256.New()
	br := io.TeeReader(blob, compressed)
	var stream io.Reader = br
	if strings.HasSuffix(l.MediaType, "gzip") {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		stream = zr
	}
	uncompressed := sha256.New()
	ur := io.TeeReader(stream, uncompressed)
	tr := tar.NewReader(ur)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, ok := cleanName(h.Name)
		if !ok {
			return fmt.Errorf("entry %q leaves the root", h.Name)
		}
		if name == "." {
			continue
		}
		if err := fn(h, name, tr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	// Drain what tar leaves (end blocks, record padding) so the hashes
	// cover it all.
	if _, err := io.Copy(io.Discard, ur); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(compressed.Sum(nil)); got != l.Digest {
		return fmt.Errorf("blob digest is %s", got)
	}
	if got := "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)); got != diffID {
		return fmt.Errorf("diff ID is %s, the config says %s", got, diffID)
	}
	return nil
}

// cleanName makes a layer entry's name relative and clean, refusing one
// that climbs out of the root.
func cleanName(n string) (string, bool) {
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", false
		}
	}
	return path.Clean(strings.TrimLeft(n, "/")), true
}

func blobPath(digest string) string {
	alg, hexPart, _ := strings.Cut(digest, ":")
	return "blobs/" + alg + "/" + hexPart
}

func unmarshal(small map[string][]byte, name string, v any) error {
	b, ok := small[name]
	if !ok {
		return fmt.Errorf("no %s", name)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func unmarshalBlob(small map[string][]byte, d Descriptor, v any) error {
	b, ok := small[blobPath(d.Digest)]
	if !ok {
		return fmt.Errorf("blob %s is missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest || int64(len(b)) != d.Size {
		return fmt.Errorf("blob %s has digest %s and size %d (want %d)", d.Digest, got, len(b), d.Size)
	}
	return json.NewDecoder(bytes.NewReader(b)).Decode(v)
}

// walk calls fn for every entry of the archive at p.
func walk(p string, fn func(h *tar.Header, r io.Reader) error) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := fn(h, tr); err != nil {
			return fmt.Errorf("%s: %s: %w", p, h.Name, err)
		}
	}
}
