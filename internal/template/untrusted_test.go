package template

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// No field of a user's recipe reaches a command the builder runs on the
// host. A recipe sets every field to a marker; the bootstrap stage's
// commands (debootstrap, tar) are recorded instead of run, and none may
// hold a marker in its arguments or environment. The markers do reach the
// build sandbox, which shows the recipe was carried out.
func TestNoRecipeFieldReachesTheHost(t *testing.T) {
	e := newTestEnv(t)
	var mu sync.Mutex
	var host [][]string
	e.m.hostRun = func(cmd *exec.Cmd, logLine func(string)) error {
		mu.Lock()
		host = append(host, append(slices.Clone(cmd.Args), cmd.Env...))
		mu.Unlock()
		// Stand in for debootstrap: a rootfs with a shell and apt-get.
		if slices.Contains(cmd.Args, "debootstrap") {
			rootfs := cmd.Args[len(cmd.Args)-2]
			for _, d := range []string{"bin", "usr/bin", "etc"} {
				os.MkdirAll(filepath.Join(rootfs, d), 0o755)
			}
			for _, f := range []string{"bin/sh", "usr/bin/apt-get"} {
				os.WriteFile(filepath.Join(rootfs, f), nil, 0o755)
			}
		}
		return nil
	}
	r := mustParse(t, `
name: marker-name
from: debian:bookworm
packages: [marker-package]
run: ['echo marker-run']
env: {MARKER_KEY: marker-value}
user: markeruser
workdir: /marker-workdir
files: [{src: "builtin:code-interpreter-v1/server.py", dest: /marker-dest}]
start: marker-start
ready: marker-ready
steps:
  - {run: 'echo marker-step', user: markerstep, workdir: /marker-step-dir, env: {MARKER_STEP: marker-step-env}}
  - {copy: {archive: `+strings.Repeat("ab", 32)+`, src: marker-src, dest: /marker-copy-dest, mode: '0750'}, user: markerowner}
`)
	archive := filepath.Join(t.TempDir(), "files.tar")
	os.WriteFile(archive, []byte("marker-archive-content"), 0o600)
	tpl, err := e.m.Build(context.Background(), "", r, Source{Archives: map[string]string{strings.Repeat("ab", 32): archive}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(host) == 0 {
		t.Fatal("the bootstrap stage ran no host command; the test proves nothing")
	}
	for _, args := range host {
		line := strings.Join(args, " ")
		if strings.Contains(line, "marker") {
			t.Errorf("a recipe field reached a host command: %s", line)
		}
		if slices.Contains(args, "debootstrap") {
			t.Logf("debootstrap command line: %s", line)
			want := debootstrapArgs("bookworm", e.pool.Path(e.m.bootstrapVolume("bookworm")+workSuffix), filepath.Join(e.dataDir, "cache", "debootstrap", "bookworm"), e.m.cfg.DebianMirror)
			if !slices.Equal(args[1:len(want)+1], want) {
				t.Errorf("debootstrap ran as %q, want %q", args[1:], want)
			}
		}
	}
	scripts := e.boxes.scripts()
	for _, want := range []string{"marker-package", "marker-run", "/marker-dest", "marker-step", "/marker-step-dir", "markerowner", "marker-src", "/marker-copy-dest"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("the build sandbox was not asked for %s:\n%s", want, scripts)
		}
	}
	if tpl.State != StateReady {
		t.Fatalf("build: %+v", tpl)
	}

	// Suites are allow-listed before anything runs.
	for _, from := range []string{"debian:sid", "debian:bookworm --include=x", "debian:../../etc"} {
		if _, err := ParseRecipe([]byte("from: '" + from + "'\n")); err == nil {
			t.Errorf("from: %s accepted", from)
		}
	}
}

// The built-in Debian recipes' packages are in the bootstrap stage, so
// they build without downloads in the build sandbox; all but the code
// interpreter's runtimes (R, a JDK, numpy and the rest: far too much for
// the stage every base build starts from), which download in the build
// sandbox and are built only when asked for.
func TestBootstrapHasBuiltinPackages(t *testing.T) {
	for _, name := range BuiltinNames() {
		if name == "code-interpreter-v1-runtimes" {
			continue
		}
		r, _ := Builtin(name)
		for _, p := range r.Packages {
			if !slices.Contains(bootstrapPackages, p) {
				t.Errorf("built-in %s installs %s, which the bootstrap stage lacks", name, p)
			}
		}
	}
}

// Host paths need Source.HostPaths; uploads build from: upload and are
// removed once used.
func TestHostPathsAndUploads(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	lower, upper := testLayers(t)
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{lower, upper}, nil)
	for _, y := range []string{"from: oci-layout:" + dir + "/img\n", "from: oci-archive:/etc/passwd\n", "from: minimal\nfiles: [{src: /etc/shadow, dest: /x}]\n"} {
		if _, err := e.m.Submit("x", mustParse(t, y), Source{}); !errors.Is(err, ErrHostPaths) {
			t.Errorf("%q without HostPaths: %v", y, err)
		}
	}

	archive := tarDir(t, filepath.Join(dir, "img"))
	staged, err := e.m.StageUpload(strings.NewReader(string(archive)), int64(len(archive)))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := e.m.Build(context.Background(), "up", mustParse(t, "from: upload\n"), Source{Archive: staged}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkImportedTree(t, e.rootfs(tpl))
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the upload was kept after the build: %v", err)
	}

	if _, err := e.m.StageUpload(strings.NewReader(string(archive)), int64(len(archive))-1); !errors.Is(err, ErrArchiveTooLarge) {
		t.Errorf("oversized upload: %v", err)
	}
	if entries, _ := os.ReadDir(e.m.uploadDir()); len(entries) != 0 {
		t.Errorf("uploads left behind: %d", len(entries))
	}
	if _, err := e.m.Submit("x", mustParse(t, "from: upload\n"), Source{}); err == nil || !strings.Contains(err.Error(), "needs an OCI archive") {
		t.Errorf("from: upload without an archive: %v", err)
	}
	bad, _ := e.m.StageUpload(strings.NewReader("not a tar at all"), 1<<20)
	if _, err := e.m.Submit("x", mustParse(t, "from: upload\n"), Source{Archive: bad}); err == nil || strings.Contains(err.Error(), bad) {
		t.Errorf("a broken upload: %v (must fail without naming the server's path)", err)
	}
}

// An absolute hard link names a path inside the rootfs, and device
// nodes are skipped (TestOCIRefusesEscapes has the layers that must fail).
func TestHostileLayerLinksAndDevices(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "img"), [][]byte{makeTar(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir}, {name: "etc/passwd", body: "image's own"},
		{name: "pw", typ: tar.TypeLink, link: "/etc/passwd"},
		{name: "mem", typ: tar.TypeChar}, {name: "disk", typ: tar.TypeBlock},
	}, false)}, nil)
	tpl, err := e.m.Build(context.Background(), "devs", mustParse(t, "from: oci-layout:img\n"), Source{Dir: dir, HostPaths: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(e.rootfs(tpl), "pw")); string(got) != "image's own" {
		t.Errorf("absolute hard link resolved to %q", got)
	}
	for _, dev := range []string{"mem", "disk"} {
		if _, err := os.Lstat(filepath.Join(e.rootfs(tpl), dev)); !os.IsNotExist(err) {
			t.Errorf("device node /%s was created: %v", dev, err)
		}
	}
}

// tarDir archives a directory tree (an OCI layout) as an uploaded
// oci-archive would be.
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var entries []tarEntry
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.IsDir() {
			entries = append(entries, tarEntry{name: rel + "/", typ: tar.TypeDir})
			return nil
		}
		data, err := os.ReadFile(p)
		entries = append(entries, tarEntry{name: rel, body: string(data)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return makeTar(t, entries, false)
}

// A step that never ends fails the build at the build timeout, and the
// sandbox is stopped.
func TestBuildTimeout(t *testing.T) {
	e := newTestEnv(t)
	e.m.cfg.BuildTimeout = 300 * time.Millisecond
	_, err := e.m.Build(context.Background(), "forever", mustParse(t, "from: minimal\nrun: ['sleep forever']\n"), Source{}, nil)
	if !errors.Is(err, ErrBuildFailed) || !strings.Contains(err.Error(), "took longer than 300ms") {
		t.Fatalf("endless step: %v", err)
	}
	if e.boxes.stopped != len(e.boxes.started) {
		t.Fatalf("sandboxes started %d, stopped %d", len(e.boxes.started), e.boxes.stopped)
	}
}

// The volumes are mounted nodev, yet debootstrap's chroot needs the
// device nodes it makes in the rootfs (apt and dpkg write to /dev/null):
// its command line allows them in its own mount namespace.
func TestBootstrapOpensDevicesOnANodevVolume(t *testing.T) {
	e := newTestEnv(t)
	rootfs, err := e.pool.Create("templates/devices")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pool.Delete("templates/devices") })
	if err := unix.Mknod(filepath.Join(rootfs, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "null"), []byte("x"), 0); err == nil {
		t.Fatal("a device node in a volume opened on the host: the volumes are not mounted nodev")
	}
	// A debootstrap that writes to the target's /dev/null, as the real
	// one's second stage does.
	bin := t.TempDir()
	fake := "#!/bin/sh\nfor a; do prev=$target; target=$a; done\necho x > \"$prev/null\"\n"
	if err := os.WriteFile(filepath.Join(bin, "debootstrap"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", debootstrapArgs("bookworm", rootfs, t.TempDir(), "http://mirror.invalid/debian")...)
	cmd.Env = []string{"PATH=" + bin + ":" + defaultPath}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the bootstrap could not open its /dev/null: %v: %s", err, out)
	}
	assertNoMountsUnder(t, rootfs)
}
