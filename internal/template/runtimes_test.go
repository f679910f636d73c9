package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/runtime"
)

// The runtime field takes one backend or a list of them, default first,
// and refuses anything else naming what it takes.
func TestRecipeRuntimeField(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"from: minimal\n", []string{"gvisor"}},
		{"from: minimal\nruntime: gvisor\n", []string{"gvisor"}},
		{"from: minimal\nruntime: microvm\n", []string{"microvm"}},
		{"from: minimal\nruntime: [microvm, gvisor]\n", []string{"microvm", "gvisor"}},
		{"from: minimal\nruntime:\n  - gvisor\n  - microvm\n", []string{"gvisor", "microvm"}},
	} {
		r, err := ParseRecipe([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := r.Runtime.Names(); !slices.Equal(got, tc.want) {
			t.Errorf("%q: runtimes %v, want %v", tc.yaml, got, tc.want)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"from: minimal\nruntime: firecracker\n", `recipe: runtime: unknown runtime "firecracker" (want one of gvisor, microvm)`},
		{"from: minimal\nruntime: [gvisor, kvm]\n", `unknown runtime "kvm" (want one of gvisor, microvm)`},
		{"from: minimal\nruntime: []\n", "recipe: runtime: empty list (want one or more of gvisor, microvm)"},
		{"from: minimal\nruntime: [gvisor, gvisor]\n", "recipe: runtime: gvisor named twice"},
		{"from: minimal\nruntime: {gvisor: true}\n", "runtime: want a name or a list of names (gvisor, microvm)"},
		{"from: minimal\nruntime: GVisor\n", `unknown runtime "GVisor"`},
	} {
		_, err := ParseRecipe([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

// gVisor alone hashes as no field at all (existing template ids stay);
// another backend is another template.
func TestRuntimeInTemplateID(t *testing.T) {
	none := resolvedRecipe{From: "minimal", Runtimes: Runtimes(nil).resolved()}
	gv := resolvedRecipe{From: "minimal", Runtimes: Runtimes{"gvisor"}.resolved()}
	vm := resolvedRecipe{From: "minimal", Runtimes: Runtimes{"gvisor", "microvm"}.resolved()}
	if none.id() != gv.id() {
		t.Error("runtime: gvisor changes the template id")
	}
	if none.id() == vm.id() {
		t.Error("runtime: [gvisor, microvm] has the id of gvisor alone")
	}
}

// imageBuilder stands in for the microVM backend's hook: it writes one
// file into its artifact, after checking it sees the finished rootfs.
type imageBuilder struct{ calls int }

func (b *imageBuilder) PrepareTemplate(_ context.Context, rootfsDir, outDir string) error {
	b.calls++
	if _, err := os.Stat(filepath.Join(rootfsDir, "bin", "busybox")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, "rootfs.ext4"), []byte("image"), 0o644)
}

// A recipe for both backends builds the gVisor rootfs as before and has
// the other backend make its artifact; on a server without that backend
// the build is refused, saying so.
func TestBuildForTwoRuntimes(t *testing.T) {
	e := newTestEnv(t)
	r := mustParse(t, "from: minimal\nruntime: [microvm, gvisor]\n")
	_, err := e.m.Build(context.Background(), "both", r, Source{}, nil)
	if err == nil || !strings.Contains(err.Error(), "the microvm runtime is not available on this server") {
		t.Fatalf("build for microvm on a gVisor-only server: %v; want a refusal", err)
	}
	e.m.Close()
	ib := &imageBuilder{}
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf, Sandboxes: e.boxes,
		Runtimes: map[string]runtime.ImageBuilder{runtime.GVisor: nil, runtime.MicroVM: ib}})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	tpl, progress := e.build(t, "both", r, "")
	if !slices.Equal(tpl.Runtimes, []string{"microvm", "gvisor"}) || ib.calls != 1 {
		t.Fatalf("record runtimes %v, %d calls of the hook; want [microvm gvisor] and 1\n%s", tpl.Runtimes, ib.calls, progress)
	}
	if !strings.Contains(progress, "make the microvm runtime's image") {
		t.Errorf("the build log does not show the microvm step:\n%s", progress)
	}
	art := e.pool.Path(ArtifactVolume(tpl.ID, runtime.MicroVM))
	if _, err := os.Stat(filepath.Join(art, "rootfs.ext4")); err != nil {
		t.Fatalf("the microvm artifact is missing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.rootfs(tpl), "bin", "busybox")); err != nil {
		t.Fatalf("the gVisor rootfs is missing: %v", err)
	}
	if err := m.Delete("both", nil); err != nil {
		t.Fatal(err)
	}
	if e.pool.Exists(ArtifactVolume(tpl.ID, runtime.MicroVM)) {
		t.Fatal("the microvm artifact outlived its template")
	}
	if _, err := m.Get(tpl.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}
