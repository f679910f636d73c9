package template

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/space-platform/space/internal/template/registrytest"
)

// testRegistry serves a registry on the loopback that wants basic auth
// user:secret, holding the test layers as team/app:1.
func testRegistry(t *testing.T) (host string) {
	t.Helper()
	reg := registrytest.Start(t, "user", "secret")
	lower, upper := testLayers(t)
	reg.Push(t, "team/app:1", [][]byte{lower, upper}, v1.Config{Env: []string{"FROM_IMAGE=yes", "PATH=/usr/bin:/bin"}, User: "1000", WorkingDir: "/home/app"})
	return reg.Host
}

func (e *testEnv) withRegistry(t *testing.T, cfg RegistryConfig) {
	t.Helper()
	e.m.Close()
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf, Sandboxes: e.boxes, Registry: cfg})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
}

func TestFromRegistryImage(t *testing.T) {
	e := newTestEnv(t)
	host := testRegistry(t)
	r := mustParse(t, "from: image:"+host+"/team/app:1\n")
	creds := &RegistryAuth{Username: "user", Password: "secret"}

	// By default a recipe cannot make the server reach the loopback.
	if _, err := e.m.Build(context.Background(), "app", r, Source{Registry: creds}, nil); err == nil || !strings.Contains(err.Error(), "could not be reached") {
		t.Fatalf("registry on the loopback by default: %v, want refused", err)
	}

	e.withRegistry(t, RegistryConfig{AllowPrivate: true})
	if _, err := e.m.Build(context.Background(), "app", r, Source{}, nil); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("without credentials: %v, want the registry's refusal", err)
	}
	if _, err := e.m.Build(context.Background(), "app", r, Source{Registry: &RegistryAuth{Username: "user", Password: "wrong"}}, nil); err == nil {
		t.Fatal("with wrong credentials: built")
	}
	var progress bytes.Buffer
	tpl, err := e.m.Build(context.Background(), "app", r, Source{Registry: creds}, &progress)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	checkImportedTree(t, e.rootfs(tpl))
	if tpl.Env["FROM_IMAGE"] != "yes" || tpl.User != "1000" || tpl.Workdir != "/home/app" {
		t.Errorf("image defaults: env %v user %q workdir %q", tpl.Env, tpl.User, tpl.Workdir)
	}
	if !strings.Contains(progress.String(), "pull image "+host+"/team/app:1 (sha256:") {
		t.Errorf("progress does not name the pull:\n%s", progress.String())
	}
	// The ID pins the manifest digest: the same reference resolves to the
	// same template, credentials are no part of it.
	again, err := e.m.Build(context.Background(), "app2", r, Source{Registry: creds}, nil)
	if err != nil || again.ID != tpl.ID {
		t.Errorf("rebuild: %v, id %s want %s", err, again.ID, tpl.ID)
	}
	if _, err := e.m.Build(context.Background(), "missing", mustParse(t, "from: image:"+host+"/team/app:nope\n"), Source{Registry: creds}, nil); err == nil || !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
		t.Errorf("missing tag: %v", err)
	}
}

// An index (what most registries serve for a tag) resolves to this
// host's platform.
func TestFromRegistryIndex(t *testing.T) {
	e := newTestEnv(t)
	e.withRegistry(t, RegistryConfig{AllowPrivate: true})
	reg := registrytest.Start(t, "user", "secret")
	lower, upper := testLayers(t)
	ref := reg.PushIndex(t, "team/multi:1", []string{"linux/arm64", "linux/" + runtime.GOARCH, "windows/" + runtime.GOARCH}, [][]byte{lower, upper}, v1.Config{})
	tpl, err := e.m.Build(context.Background(), "multi", mustParse(t, "from: image:"+ref+"\n"), Source{Registry: &RegistryAuth{Username: "user", Password: "secret"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Env["PLATFORM"] != "linux/"+runtime.GOARCH {
		t.Errorf("picked the image of %q, want linux/%s", tpl.Env["PLATFORM"], runtime.GOARCH)
	}
	checkImportedTree(t, e.rootfs(tpl))
}

func TestImageRefValidation(t *testing.T) {
	for _, bad := range []string{"image:", "image:UPPER/case", "image:a b", "image:" + strings.Repeat("a", 600)} {
		if _, err := ParseRecipe([]byte("from: '" + bad + "'\n")); err == nil {
			t.Errorf("from %q accepted", bad)
		}
	}
	if _, err := ParseRecipe([]byte("from: image:alpine:3\n")); err != nil {
		t.Errorf("from image:alpine:3: %v", err)
	}
}
