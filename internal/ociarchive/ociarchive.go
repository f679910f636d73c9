// Package ociarchive reads the description of the container image archives
// scripts/image.sh writes: an OCI image layout in one tar (oci-layout,
// index.json, blobs/sha256/...) that also carries a docker-archive
// manifest.json. It checks that both halves name the same blobs and that
// every blob matches its digest, and returns the references, manifest and
// config, so a test can judge an image without a container runtime. It
// knows tar and JSON only: the main module takes no image library. (The
// layers are unpacked by internal/template, which builds templates from
// such archives.)
package ociarchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// at p, checks that both halves describe the same blobs, and that every
// blob holds what its digest says.
func Open(p string) (*Image, error) {
	small := map[string][]byte{}
	present := map[string]struct{}{}
	err := walk(p, func(h *tar.Header, r io.Reader) error {
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		var keep bytes.Buffer
		var w io.Writer = io.Discard
		if h.Size <= smallFileMax {
			w = &keep
		}
		present[name] = struct{}{}
		sum := sha256.New()
		if _, err := io.Copy(io.MultiWriter(sum, w), r); err != nil {
			return err
		}
		if hexPart, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hex.EncodeToString(sum.Sum(nil)) != hexPart {
			return fmt.Errorf("blob content has digest sha256:%s", hex.EncodeToString(sum.Sum(nil)))
		}
		if h.Size <= smallFileMax {
			small[name] = keep.Bytes()
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
	for i, l := range img.Manifest.Layers {
		if _, ok := present[blobPath(l.Digest)]; !ok {
			return nil, fmt.Errorf("%s: layer %d blob %s is missing", p, i, l.Digest)
		}
	}
	return img, nil
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
