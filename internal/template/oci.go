package template

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// ociImage is an image resolved far enough to hash it and to unpack it:
// ordered layer blobs plus the config defaults a template inherits.
type ociImage struct {
	src    imageSource
	layers []string // blob paths inside src, bottom layer first
	config imageConfig
	// digest identifies the image content: the manifest digest of an OCI
	// image, or the config digest (which lists layer diff IDs) of a
	// docker-save archive.
	digest string
}

type imageConfig struct {
	Env        []string `json:"Env"`
	User       string   `json:"User"`
	WorkingDir string   `json:"WorkingDir"`
}

// imageSource reads named files of an OCI layout or docker-save tree,
// either from a directory or straight from a tar archive.
type imageSource interface {
	open(name string) (io.ReadCloser, error)
	String() string
}

type dirSource string

func (d dirSource) open(name string) (io.ReadCloser, error) {
	if !fs.ValidPath(name) {
		return nil, fmt.Errorf("invalid path %q in image", name)
	}
	return os.Open(filepath.Join(string(d), filepath.FromSlash(name)))
}

func (d dirSource) String() string { return string(d) }

// tarSource reads entries from an uncompressed tar on demand. Each open
// scans the headers from the start, which is cheap because tar.Reader
// seeks over entry data in a file.
type tarSource string

func (t tarSource) open(name string) (io.ReadCloser, error) {
	f, err := os.Open(string(t))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			f.Close()
			return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read %s: %w", t, err)
		}
		if path.Clean(strings.TrimPrefix(hdr.Name, "./")) == name && hdr.Typeflag == tar.TypeReg {
			return struct {
				io.Reader
				io.Closer
			}{tr, f}, nil
		}
	}
}

func (t tarSource) String() string { return string(t) }

// OCI media types we follow from an index.
const (
	mediaTypeOCIIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeDockerList  = "application/vnd.docker.distribution.manifest.list.v2+json"
	maxImageMetadataSize = 16 << 20
)

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type ociIndex struct {
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	MediaType string          `json:"mediaType"`
	Config    ociDescriptor   `json:"config"`
	Layers    []ociDescriptor `json:"layers"`
	Manifests []ociDescriptor `json:"manifests"` // set when this blob is an index
}

type dockerSaveEntry struct {
	Config string   `json:"Config"`
	Layers []string `json:"Layers"`
}

// resolveImage reads an OCI layout directory (kind oci-layout) or an OCI /
// docker-save archive (kind oci-archive).
func resolveImage(kind, location string) (*ociImage, error) {
	var src imageSource
	switch kind {
	case FromOCILayout:
		info, err := os.Stat(location)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", location)
		}
		src = dirSource(location)
	case FromOCIArchive:
		if _, err := os.Stat(location); err != nil {
			return nil, err
		}
		src = tarSource(location)
	default:
		return nil, fmt.Errorf("not an image base: %s", kind)
	}
	// docker save writes manifest.json (newer Docker also writes an OCI
	// index.json); it is the simpler description, so prefer it.
	if data, err := readSmall(src, "manifest.json"); err == nil {
		return resolveDockerSave(src, data)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	data, err := readSmall(src, "index.json")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s has neither index.json (OCI layout) nor manifest.json (docker save)", src)
		}
		return nil, err
	}
	return resolveOCILayout(src, data)
}

func resolveDockerSave(src imageSource, data []byte) (*ociImage, error) {
	var entries []dockerSaveEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("parse manifest.json: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("manifest.json lists no images")
	}
	e := entries[0]
	img := &ociImage{src: src}
	for _, l := range e.Layers {
		img.layers = append(img.layers, cleanImagePath(l))
	}
	configData, err := readSmall(src, cleanImagePath(e.Config))
	if err != nil {
		return nil, fmt.Errorf("image config %s: %w", e.Config, err)
	}
	if err := parseImageConfig(configData, &img.config); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(configData)
	img.digest = "docker-config:sha256:" + hex.EncodeToString(sum[:])
	return img, nil
}

func resolveOCILayout(src imageSource, indexData []byte) (*ociImage, error) {
	var index ociIndex
	if err := json.Unmarshal(indexData, &index); err != nil {
		return nil, fmt.Errorf("parse index.json: %w", err)
	}
	desc, err := pickManifest(index.Manifests)
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	// Follow nested indexes (multi-platform images) down to a manifest.
	for depth := 0; ; depth++ {
		if depth > 4 {
			return nil, errors.New("image indexes nested too deeply")
		}
		data, err := readBlob(src, desc.Digest)
		if err != nil {
			return nil, err
		}
		var m ociManifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
		}
		if desc.MediaType == mediaTypeOCIIndex || desc.MediaType == mediaTypeDockerList || m.MediaType == mediaTypeOCIIndex || len(m.Manifests) > 0 {
			if desc, err = pickManifest(m.Manifests); err != nil {
				return nil, fmt.Errorf("index %s: %w", desc.Digest, err)
			}
			continue
		}
		img := &ociImage{src: src, digest: "oci-manifest:" + desc.Digest}
		for _, l := range m.Layers {
			p, err := blobPath(l.Digest)
			if err != nil {
				return nil, err
			}
			img.layers = append(img.layers, p)
		}
		configData, err := readBlob(src, m.Config.Digest)
		if err != nil {
			return nil, fmt.Errorf("image config: %w", err)
		}
		if err := parseImageConfig(configData, &img.config); err != nil {
			return nil, err
		}
		return img, nil
	}
}

// pickManifest chooses the manifest for this host's platform, or the only
// one.
func pickManifest(descs []ociDescriptor) (ociDescriptor, error) {
	if len(descs) == 0 {
		return ociDescriptor{}, errors.New("no manifests")
	}
	for _, d := range descs {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			return d, nil
		}
	}
	for _, d := range descs {
		if d.Platform == nil {
			return d, nil
		}
	}
	if len(descs) == 1 {
		return descs[0], nil
	}
	return ociDescriptor{}, fmt.Errorf("no manifest for linux/%s", runtime.GOARCH)
}

func parseImageConfig(data []byte, out *imageConfig) error {
	var cfg struct {
		Config imageConfig `json:"config"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parse image config: %w", err)
	}
	*out = cfg.Config
	return nil
}

// blobPath maps "sha256:<hex>" to "blobs/sha256/<hex>", refusing anything
// that could name a path outside blobs/.
func blobPath(digest string) (string, error) {
	alg, hexPart, ok := strings.Cut(digest, ":")
	if !ok || alg == "" || hexPart == "" || strings.ContainsAny(digest, "/\\.") {
		return "", fmt.Errorf("invalid digest %q", digest)
	}
	return "blobs/" + alg + "/" + hexPart, nil
}

func readBlob(src imageSource, digest string) ([]byte, error) {
	p, err := blobPath(digest)
	if err != nil {
		return nil, err
	}
	return readSmall(src, p)
}

// readSmall reads a metadata file, refusing absurd sizes.
func readSmall(src imageSource, name string) ([]byte, error) {
	rc, err := src.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxImageMetadataSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxImageMetadataSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxImageMetadataSize)
	}
	return data, nil
}

func cleanImagePath(p string) string {
	return path.Clean(strings.TrimPrefix(p, "./"))
}

// envMap turns an image's KEY=VALUE list into a map.
func envMap(list []string) map[string]string {
	m := map[string]string{}
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}
