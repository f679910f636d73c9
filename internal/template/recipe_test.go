package template

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseRecipeErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty document"},
		{"unknown field", "from: minimal\nfom: x\n", "unknown field fom"},
		{"missing from", "name: x\n", "from: required"},
		{"unknown base", "from: ubuntu:jammy\n", `unknown base kind "ubuntu"`},
		{"bad suite", "from: debian:Bookworm\n", "invalid Debian suite"},
		{"packages on minimal", "from: minimal\npackages: [git]\n", "packages: apt packages need a Debian-based base"},
		{"bad package", "from: debian:bookworm\npackages: [git, 'rm -rf']\n", "packages[1]"},
		{"packages not a list", "from: debian:bookworm\npackages: git\n", "line 2"},
		{"bad env key", "from: minimal\nenv: {'A-B': x}\n", `env: invalid variable name "A-B"`},
		{"relative workdir", "from: minimal\nworkdir: home\n", "workdir"},
		{"bad user", "from: minimal\nuser: 'bad user'\n", "user: invalid user"},
		{"file without src", "from: minimal\nfiles: [{dest: /x}]\n", "files[0].src: required"},
		{"file relative dest", "from: minimal\nfiles: [{src: a, dest: x}]\n", "files[0].dest"},
		{"file bad mode", "from: minimal\nfiles: [{src: a, dest: /x, mode: '0999'}]\n", "files[0].mode"},
		{"bad name", "name: My_Template\nfrom: minimal\n", "name: invalid template name"},
		{"empty run step", "from: minimal\nrun: ['  ']\n", "run[0]: empty step"},
		{"bad template name", "from: 'template:Bad Name'\n", "invalid template name"},
		{"unknown builtin file", "from: minimal\nfiles: [{src: 'builtin:nope/x.py', dest: /x}]\n", "no such built-in file"},
		{"builtin file escaping", "from: minimal\nfiles: [{src: 'builtin:../builtin.go', dest: /x}]\n", "files[0].src"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRecipe([]byte(c.yaml))
			if err == nil {
				t.Fatalf("ParseRecipe accepted %q", c.yaml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestParseRecipeFull(t *testing.T) {
	r, err := ParseRecipe([]byte(`
name: mytpl
from: debian:bookworm
packages: [python3, git]
run:
  - echo hi > /etc/greeting
env: {FOO: bar}
user: user
workdir: /home/user
files:
  - {src: ./app, dest: /opt/app, mode: "0755"}
start: "python3 -m http.server 8080"
ready: "curl -sf localhost:8080"
`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "mytpl" || r.From != "debian:bookworm" || len(r.Packages) != 2 || r.Env["FOO"] != "bar" ||
		r.Files[0].Mode != "0755" || r.Start == "" || r.Ready == "" || r.User != "user" || r.Workdir != "/home/user" {
		t.Fatalf("parsed %+v", r)
	}
	for _, from := range []string{"minimal", "oci-archive:/x.tar", "oci-layout:img", "template:base", "upload"} {
		if _, err := ParseFrom(from); err != nil {
			t.Errorf("ParseFrom(%q): %v", from, err)
		}
	}
}

func TestBuiltins(t *testing.T) {
	names := BuiltinNames()
	if strings.Join(names, ",") != "base,code-interpreter-v1,code-interpreter-v1-runtimes,minimal" {
		t.Fatalf("BuiltinNames() = %v", names)
	}
	for _, name := range names {
		r, ok := Builtin(name)
		if !ok || r.Name != name {
			t.Fatalf("Builtin(%q) = %+v, %v", name, r, ok)
		}
	}
	base, _ := Builtin("base")
	if base.From != "debian:bookworm" || base.User != "user" || base.Workdir != "/home/user" {
		t.Fatalf("base recipe: %+v", base)
	}
	if _, ok := Builtin("nope"); ok {
		t.Fatal("Builtin(nope) found something")
	}
	// The code interpreter is a thin layer (its server and kernel specs)
	// over the runtimes, so that editing the server rebuilds in seconds.
	ci, _ := Builtin("code-interpreter-v1")
	if ci.From != "template:code-interpreter-v1-runtimes" || ci.Start == "" || ci.Ready == "" || len(ci.Packages) != 0 ||
		len(ci.Files) != 2 || ci.Files[0].Src != "builtin:code-interpreter-v1" {
		t.Fatalf("code-interpreter-v1 recipe: %+v", ci)
	}
	rt, _ := Builtin("code-interpreter-v1-runtimes")
	if rt.From != "template:base" || len(rt.Files) != 0 || !slices.Contains(rt.Packages, "python3-matplotlib") {
		t.Fatalf("code-interpreter-v1-runtimes recipe: %+v", rt)
	}
}

func TestMaterializeBuiltin(t *testing.T) {
	dir := t.TempDir()
	p, err := materializeBuiltin(dir, "code-interpreter-v1/server.py")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := builtinFS.ReadFile("recipes/code-interpreter-v1/server.py")
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("materialized %s: %v", p, err)
	}
	digest, err := treeDigest(p)
	if err != nil {
		t.Fatal(err)
	}
	// Again (in place already), and into another cache under a strict
	// umask: the same path, and a copy with the same digest.
	if again, err := materializeBuiltin(dir, "code-interpreter-v1/server.py"); err != nil || again != p {
		t.Fatalf("second materialize: %q, %v (first %q)", again, err, p)
	}
	old := syscall.Umask(0o077)
	other, err := materializeBuiltin(t.TempDir(), "code-interpreter-v1")
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := treeDigest(filepath.Join(other, "server.py")); err != nil || d != digest {
		t.Fatalf("digest under umask 077: %s, %v; want %s", d, err, digest)
	}
	if _, err := materializeBuiltin(dir, "../builtin.go"); err == nil {
		t.Fatal("materialized a path outside the built-in recipes")
	}
}
