package template

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/space-platform/space/internal/publicnet"
)

// RegistryAuth are the credentials of a from: image:<reference> base. They
// come with the request, not the recipe: they are neither hashed into the
// template ID nor stored.
type RegistryAuth struct {
	Username, Password string
}

// RegistryConfig configures pulls of from: image:<reference> bases.
type RegistryConfig struct {
	// AllowPrivate lets references name registries on addresses that are
	// not public (an operator's internal registry; the tests' registry on
	// the loopback). Off, every connection goes through a
	// publicnet.Dialer, so that a recipe cannot make the server reach what
	// sandboxes cannot.
	AllowPrivate bool
	// Transport overrides the HTTP transport of registry requests
	// (tests); nil: a transport that applies AllowPrivate.
	Transport http.RoundTripper
	// MaxImageBytes bounds an image's compressed layers
	// (DefaultMaxImageBytes when zero).
	MaxImageBytes int64
	// dial connects to an address the public-only guard let through
	// (tests record them instead of connecting); nil: a net.Dialer.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DefaultMaxImageBytes is RegistryConfig.MaxImageBytes's default.
const DefaultMaxImageBytes = 8 << 30

// resolveTimeout bounds the manifest and config requests a Submit waits
// for; the layers are fetched by the build in the background.
const resolveTimeout = 2 * time.Minute

// errUnreachableRegistry is the one answer for a registry the server did
// not connect to, refused as not public or not answering alike, so that
// a recipe cannot map what the server can reach by the differences.
var errUnreachableRegistry = errors.New("the registry could not be reached: its address is not public or it did not answer (the server's operator may allow registries on private addresses with --template-registry-private)")

// parseImageRef parses an image reference as docker pull takes it
// (docker.io and :latest implied).
func parseImageRef(s string) (name.Reference, error) {
	if len(s) > 512 || strings.ContainsAny(s, " \t\r\n\x00") {
		return nil, fmt.Errorf("invalid image reference %q", s)
	}
	ref, err := name.ParseReference(s)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference %q: %v", s, err)
	}
	return ref, nil
}

// transport is the HTTP transport of registry requests.
func (c RegistryConfig) transport() http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	if !c.AllowPrivate {
		// Every connection (the registry, its token realm, the blob
		// store it redirects to) goes to a public address only, and any
		// refusal or failure to connect reads the same.
		dial := c.dial
		if dial == nil {
			dial = d.DialContext
		}
		t.DialContext = publicnet.Dialer{Dial: dial}.DialContext
	}
	t.Proxy = nil // registries are reached directly, never through the environment's proxy
	return t
}

// remoteImage is a registry image resolved far enough to hash it: its
// manifest digest and config. The layers are fetched by pull.
type remoteImage struct {
	ref name.Reference
	// opts fetch it again (credentials, transport), by digest, for pull.
	opts   []remote.Option
	digest string
	config imageConfig
	size   int64
}

// resolveRemote fetches the manifest (for this host's platform, from an
// index) and the config of ref.
func (c RegistryConfig) resolveRemote(ctx context.Context, s string, auth *RegistryAuth) (*remoteImage, error) {
	ref, err := parseImageRef(s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	authenticator := authn.Anonymous
	if auth != nil && (auth.Username != "" || auth.Password != "") {
		authenticator = authn.FromConfig(authn.AuthConfig{Username: auth.Username, Password: auth.Password})
	}
	opts := []remote.Option{remote.WithAuth(authenticator), remote.WithTransport(c.transport()),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	img, err := remote.Image(ref, append(opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %s", ref, registryError(err))
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %s", ref, registryError(err))
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %s", ref, registryError(err))
	}
	var size int64
	for _, l := range manifest.Layers {
		size += l.Size
	}
	limit := c.MaxImageBytes
	if limit <= 0 {
		limit = DefaultMaxImageBytes
	}
	if size > limit {
		return nil, fmt.Errorf("image %s: its layers are %s, more than this server takes (%s)", ref, humanBytes(size), humanBytes(limit))
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %s", ref, registryError(err))
	}
	return &remoteImage{ref: ref, opts: opts, digest: digest.String(), size: size, config: imageConfig{
		Env: cfg.Config.Env, User: cfg.Config.User, WorkingDir: cfg.Config.WorkingDir,
	}}, nil
}

// registryError shortens go-containerregistry's errors (which may quote
// whole response bodies) to their first line.
func registryError(err error) string {
	msg := err.Error()
	if errors.Is(err, publicnet.ErrUnreachable) {
		return errUnreachableRegistry.Error()
	}
	msg, _, _ = strings.Cut(msg, "\n")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// pull writes the image's blobs, digests verified as they arrive, into a
// fresh OCI layout at dir, which the strict unpacker then reads like an
// uploaded one.
func (r *remoteImage) pull(ctx context.Context, dir string) (*ociImage, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	// By digest: what the registry serves now under the tag may differ
	// from what the template ID was computed from.
	img, err := remote.Image(r.ref.Context().Digest(r.digest), append(r.opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %s", r.ref, registryError(err))
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r.ref, err)
	}
	if err := p.AppendImage(img); err != nil {
		return nil, fmt.Errorf("pull %s: %s", r.ref, registryError(err))
	}
	pulled, err := resolveImage(FromOCILayout, dir)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r.ref, err)
	}
	if pulled.digest != "oci-manifest:"+r.digest {
		return nil, fmt.Errorf("pull %s: the pulled manifest is %s, not the resolved %s", r.ref, pulled.digest, r.digest)
	}
	return pulled, nil
}
