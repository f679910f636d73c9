// Package registrytest serves an OCI registry on the loopback for tests
// (go-containerregistry's in-memory registry behind basic auth) and
// pushes images built from layer tars to it: no registry is reachable
// from CI.
package registrytest

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is a running test registry.
type Registry struct {
	// Host is its host:port, the registry part of image references.
	Host           string
	user, password string
}

// Start serves a registry that wants basic auth user:password; it stops
// when the test ends.
func Start(t testing.TB, user, password string) *Registry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Registry{Host: strings.TrimPrefix(srv.URL, "http://"), user: user, password: password}
}

// Push stores an image of the layers (tars, gzipped or not, bottom
// first) and config as repo:tag and returns its reference.
func (r *Registry) Push(t testing.TB, repoTag string, layers [][]byte, config v1.Config) string {
	t.Helper()
	img := r.image(t, layers, config)
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password})); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

func (r *Registry) image(t testing.TB, layers [][]byte, config v1.Config) v1.Image {
	t.Helper()
	img := empty.Image
	for _, data := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	img, err := mutate.Config(img, config)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// PushIndex stores a multi-platform index as repoTag: one image per
// platform ("linux/amd64"), each of the layers and config with the
// platform added to its env as PLATFORM=<os/arch>.
func (r *Registry) PushIndex(t testing.TB, repoTag string, platforms []string, layers [][]byte, config v1.Config) string {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	for _, p := range platforms {
		osName, arch, _ := strings.Cut(p, "/")
		cfg := config
		cfg.Env = append(append([]string(nil), config.Env...), "PLATFORM="+p)
		img := r.image(t, layers, cfg)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}}})
	}
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password})); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}
