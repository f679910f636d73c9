package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/storage"
)

type testEnv struct {
	dataDir string
	pool    *storage.Pool
	m       *Manager
	boxes   *fakeSandboxes
}

// fakeSandboxes stands in for the node's gVisor build sandboxes in unit
// tests of the builder's logic: it records what a build asks of the
// sandbox and writes files into the volume the way the agent would.
// Real steps in real sandboxes are tested end to end (test/e2e).
type fakeSandboxes struct {
	pool *storage.Pool
	mu   sync.Mutex
	runs []fakeRun
	// writes are sandbox path -> content.
	writes  map[string]string
	started []string
	stopped int
}

type fakeRun struct {
	script string
	env    map[string]string
}

func (f *fakeSandboxes) Start(_ context.Context, volume string) (BuildSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, volume)
	return &fakeSandbox{f: f, volume: volume}, nil
}

type fakeSandbox struct {
	f      *fakeSandboxes
	volume string
}

// Run records the script; a script containing "exit N" fails with that
// status after printing its first echo, like a shell would.
func (b *fakeSandbox) Run(ctx context.Context, script string, env map[string]string, out io.Writer) error {
	b.f.mu.Lock()
	b.f.runs = append(b.f.runs, fakeRun{script, env})
	b.f.mu.Unlock()
	if strings.Contains(script, "sleep 1") {
		time.Sleep(time.Second)
	}
	if strings.Contains(script, "sleep forever") {
		<-ctx.Done()
		return ctx.Err()
	}
	for _, line := range strings.Split(script, ";") {
		if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "echo "); ok {
			fmt.Fprintln(out, msg)
		}
	}
	if _, code, ok := strings.Cut(script, "exit "); ok && !strings.Contains(script, "set -e") {
		return errors.New("exit status " + strings.Fields(code)[0])
	}
	return nil
}

func (b *fakeSandbox) WriteFile(_ context.Context, path string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	if b.f.writes == nil {
		b.f.writes = map[string]string{}
	}
	b.f.writes[path] = string(data)
	return nil
}

func (b *fakeSandbox) Stop(context.Context) error {
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	b.f.stopped++
	return nil
}

// scripts returns every script the fake was asked to run, joined.
func (f *fakeSandboxes) scripts() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []string
	for _, r := range f.runs {
		all = append(all, r.script)
	}
	return strings.Join(all, "\n")
}

// newTestEnv gives a Manager on a btrfs loop image in a temp dir; the
// image is unmounted and its loop device detached when the test ends.
func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("template builds need root (btrfs, chroot, namespaces)")
	}
	dir := t.TempDir()
	pool, err := storage.Open(context.Background(), storage.Options{
		Root:           filepath.Join(dir, "volumes"),
		ImagePath:      filepath.Join(dir, "volumes.img"),
		ImageSizeBytes: 4 << 30,
		Logf:           t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{dataDir: dir, pool: pool, boxes: &fakeSandboxes{pool: pool}}
	t.Cleanup(func() {
		if env.m != nil {
			env.m.Close()
		}
		assertNoMountsUnder(t, filepath.Join(dir, "volumes")+"/")
		if err := pool.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	env.m = env.newManager(t)
	return env
}

func (e *testEnv) newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf, Sandboxes: e.boxes})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// assertNoMountsUnder fails when a build left a mount below prefix.
func assertNoMountsUnder(t *testing.T, prefix string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			t.Errorf("leaked mount: %s", line)
		}
	}
}

func mustParse(t *testing.T, y string) *Recipe {
	t.Helper()
	r, err := ParseRecipe([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *testEnv) build(t *testing.T, name string, r *Recipe, baseDir string) (*Template, string) {
	t.Helper()
	var progress bytes.Buffer
	tpl, err := e.m.Build(context.Background(), name, r, Source{Dir: baseDir, HostPaths: true}, &progress)
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, progress.String())
	}
	return tpl, progress.String()
}

func (e *testEnv) rootfs(tpl *Template) string { return tpl.RootfsPath(e.pool) }

func TestMinimalBuild(t *testing.T) {
	e := newTestEnv(t)
	r, _ := Builtin("minimal")
	start := time.Now()
	tpl, progress := e.build(t, "", r, "")
	t.Logf("minimal build took %s", time.Since(start))
	if tpl.State != StateReady || tpl.Name != "minimal" || !idPattern.MatchString(tpl.ID) || tpl.ReadyAt == nil {
		t.Fatalf("record %+v", tpl)
	}
	if tpl.User != "user" || tpl.Workdir != "/home/user" || tpl.RootfsVolume != "templates/"+tpl.ID || tpl.SizeBytes <= 0 {
		t.Fatalf("record %+v", tpl)
	}
	if !strings.Contains(progress, "[1/2] minimal: busybox") || !strings.Contains(progress, "ready") {
		t.Fatalf("progress:\n%s", progress)
	}

	root := e.rootfs(tpl)
	if target, err := os.Readlink(filepath.Join(root, "bin/sh")); err != nil || target != "/bin/busybox" {
		t.Fatalf("/bin/sh -> %q, %v", target, err)
	}
	for _, p := range []string{"bin/busybox", "usr/bin/env", "etc/group", "etc/hostname", "etc/hosts", "etc/resolv.conf", ".space", "proc", "dev", "sys", "run", "var/tmp", "root", "sbin"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			t.Errorf("missing /%s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "bin/bash")); err == nil {
		t.Error("/bin/bash exists; minimal must not pretend to have bash")
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), "root:x:0:0:") || !strings.Contains(string(passwd), "user:x:1000:1000:user:/home/user:/bin/sh") {
		t.Fatalf("/etc/passwd:\n%s", passwd)
	}
	if info, err := os.Stat(filepath.Join(root, "tmp")); err != nil || info.Mode()&os.ModeSticky == 0 || info.Mode().Perm() != 0o777 {
		t.Fatalf("/tmp mode: %v, %v", info.Mode(), err)
	}
	if info, err := os.Stat(filepath.Join(root, "home/user")); err != nil || info.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Fatalf("/home/user not owned by uid 1000: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("template rootfs is writable: %v", err)
	}

	// Same recipe: no rebuild.
	start = time.Now()
	again, progress := e.build(t, "minimal", r, "")
	if again.ID != tpl.ID || !strings.Contains(progress, "up to date") || time.Since(start) > time.Second {
		t.Fatalf("rebuild: id %s vs %s, progress %q", again.ID, tpl.ID, progress)
	}
	sub, err := e.m.Submit("minimal", r, Source{})
	if err != nil || sub.State != StateReady || sub.ID != tpl.ID {
		t.Fatalf("Submit of built recipe: %+v, %v", sub, err)
	}

	got, err := e.m.Get("minimal")
	if err != nil || got.ID != tpl.ID {
		t.Fatalf("Get(name) = %+v, %v", got, err)
	}
	if got, err := e.m.Get(tpl.ID); err != nil || got.ID != tpl.ID {
		t.Fatalf("Get(id) = %+v, %v", got, err)
	}
	if _, err := e.m.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(nope): %v", err)
	}
	if list := e.m.List(); len(list) != 1 || list[0].Name != "minimal" {
		t.Fatalf("List() = %+v", list)
	}
	lines, done, err := e.m.Logs("minimal", 0)
	if err != nil || !done || len(lines) < 2 || !strings.HasPrefix(lines[0], "[1/2]") {
		t.Fatalf("Logs = %q, %v, %v", lines, done, err)
	}
	if tail, _, _ := e.m.Logs("minimal", len(lines)-1); len(tail) != 1 {
		t.Fatalf("Logs from last line = %q", tail)
	}

	// The catalog survives a restart.
	e.m.Close()
	e.m = e.newManager(t)
	if got, err := e.m.Get("minimal"); err != nil || got.State != StateReady || got.ID != tpl.ID {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
}

func TestIDStability(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := "from: minimal\nrun: [echo hi]\nfiles: [{src: f, dest: /f}]\n"
	id := func(name, y string) string {
		t.Helper()
		p, err := e.m.plan(name, mustParse(t, y), Source{Dir: dir, HostPaths: true})
		if err != nil {
			t.Fatal(err)
		}
		return p.id
	}
	first := id("a", recipe)
	if id("a", recipe) != first {
		t.Fatal("same recipe, different ID")
	}
	if id("other-name", recipe) != first {
		t.Fatal("the name changed the ID")
	}
	if id("a", "from: minimal\nrun: [echo bye]\nfiles: [{src: f, dest: /f}]\n") == first {
		t.Fatal("changed run step kept the ID")
	}
	if id("a", recipe+"env: {A: b}\n") == first {
		t.Fatal("added env kept the ID")
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id("a", recipe) == first {
		t.Fatal("changed file content kept the ID")
	}
	if _, err := e.m.plan("", mustParse(t, "from: minimal\n"), Source{}); err == nil {
		t.Fatal("plan without any name succeeded")
	}
	if _, err := e.m.plan("x", mustParse(t, recipe), Source{HostPaths: true}); err == nil || !strings.Contains(err.Error(), "files") {
		t.Fatalf("files without a recipe dir: %v", err)
	}
	if _, err := e.m.plan("x", mustParse(t, recipe), Source{Dir: dir}); !errors.Is(err, ErrHostPaths) {
		t.Fatalf("host files without HostPaths: %v", err)
	}
	if _, err := e.m.plan("x", mustParse(t, "from: template:absent\n"), Source{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing parent template: %v", err)
	}
}

func TestChildTemplate(t *testing.T) {
	e := newTestEnv(t)
	minimal, _ := Builtin("minimal")
	parent, _ := e.build(t, "", minimal, "")

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app/sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "app/main.sh"), []byte("#!/bin/sh\necho app\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "app/sub/data"), []byte("data"), 0o600)
	os.Symlink("main.sh", filepath.Join(dir, "app/link"))
	os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o644)

	r := mustParse(t, `
from: template:minimal
run:
  - echo hi > /etc/greeting
  - echo "$FOO" > /etc/foo; id -u > /etc/builder-uid; test -e /proc/self/status && echo proc >> /etc/foo
env: {FOO: bar}
workdir: /opt/app
files:
  - {src: ./app, dest: /opt/app}
  - {src: tool, dest: /usr/local/bin/tool, mode: "0755"}
start: sleep infinity
`)
	child, progress := e.build(t, "child", r, dir)
	if child.ParentID != parent.ID || child.Env["FOO"] != "bar" || child.User != "user" || child.Workdir != "/opt/app" || child.Start != "sleep infinity" {
		t.Fatalf("child record %+v", child)
	}
	for _, want := range []string{"[1/5] snapshot template minimal", "starting the build sandbox", "[2/5] run: echo hi > /etc/greeting", "[4/5] copy 2 file entries", "[5/5] finalize"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
	// Steps and file copies went to one sandbox booted on the work
	// volume, which was stopped before the volume was published.
	f := e.boxes
	if len(f.started) != 1 || f.started[0] != workVolume(child.ID) || f.stopped != 1 {
		t.Fatalf("sandboxes started %v, stopped %d", f.started, f.stopped)
	}
	if f.runs[0].script != "echo hi > /etc/greeting" || f.runs[1].env["FOO"] != "bar" || f.runs[1].env["PATH"] == "" {
		t.Errorf("steps ran as %+v", f.runs[:2])
	}
	for dest, want := range map[string]string{"/opt/app/main.sh": "#!/bin/sh\necho app\n", "/opt/app/sub/data": "data", "/usr/local/bin/tool": "#!/bin/sh\n"} {
		if got := f.writes[dest]; got != want {
			t.Errorf("sandbox file %s = %q, want %q", dest, got, want)
		}
	}
	scripts := f.scripts()
	for _, want := range []string{"mkdir -p '/opt/app/sub'", "ln -s 'main.sh' '/opt/app/link'", "chmod 0600 '/opt/app/sub/data'", "chmod 755 '/usr/local/bin/tool'"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("file copy scripts lack %q:\n%s", want, scripts)
		}
	}
	if _, err := os.Stat(filepath.Join(e.rootfs(child), ".space")); err != nil {
		t.Errorf("template lacks the agent mount point: %v", err)
	}

	// A failing step fails the build, cleans its work volume and leaks
	// no mounts (checked at cleanup).
	bad := mustParse(t, "from: template:minimal\nrun: ['echo about to fail; exit 3']\n")
	_, err := e.m.Build(context.Background(), "bad", bad, Source{}, nil)
	if !errors.Is(err, ErrBuildFailed) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("failing step: %v", err)
	}
	got, _ := e.m.Get("bad")
	if got.State != StateFailed || e.pool.Exists(workVolume(got.ID)) || e.pool.Exists(got.RootfsVolume) {
		t.Fatalf("failed build: %+v", got)
	}
	lines, done, _ := e.m.Logs("bad", 0)
	if !done || !strings.Contains(strings.Join(lines, "\n"), "about to fail") || !strings.HasPrefix(lines[len(lines)-1], "build failed") {
		t.Fatalf("failed build log: %q", lines)
	}
}

func TestSubmitSharesBuild(t *testing.T) {
	e := newTestEnv(t)
	r := mustParse(t, "from: minimal\nrun: ['sleep 1; echo slow step']\n")
	var wg sync.WaitGroup
	results := make([]*Template, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tpl, err := e.m.Submit("slow", r, Source{})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = tpl
		}()
	}
	wg.Wait()
	for _, tpl := range results {
		if tpl == nil || tpl.ID != results[0].ID || tpl.State != StateBuilding {
			t.Fatalf("submit results %+v", results)
		}
	}
	if _, done, _ := e.m.Logs("slow", 0); done {
		t.Fatal("Logs says done while building")
	}
	if err := e.m.Delete("slow", nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("Delete while building: %v", err)
	}
	tpl, err := e.m.Wait(context.Background(), "slow")
	if err != nil || tpl.State != StateReady {
		t.Fatalf("Wait: %+v, %v", tpl, err)
	}
	lines, done, _ := e.m.Logs(tpl.ID, 0)
	if !done || strings.Count(strings.Join(lines, "\n"), "[1/3]") != 1 {
		t.Fatalf("expected exactly one build, log:\n%s", strings.Join(lines, "\n"))
	}
}

func TestDeleteRefusedInUse(t *testing.T) {
	e := newTestEnv(t)
	r, _ := Builtin("minimal")
	tpl, _ := e.build(t, "", r, "")
	child, _ := e.build(t, "child", mustParse(t, "from: template:minimal\nenv: {X: y}\n"), "")

	used := map[string]bool{tpl.ID: true}
	inUse := func(id string) bool { return used[id] }
	if err := e.m.Delete("minimal", inUse); !errors.Is(err, ErrInUse) {
		t.Fatalf("Delete in use: %v", err)
	}
	if !e.pool.Exists(tpl.RootfsVolume) {
		t.Fatal("volume deleted despite refusal")
	}
	used[tpl.ID] = false
	// Children are full snapshots: deleting the parent is fine.
	if err := e.m.Delete("minimal", inUse); err != nil {
		t.Fatal(err)
	}
	if e.pool.Exists(tpl.RootfsVolume) {
		t.Fatal("volume survived Delete")
	}
	if _, err := e.m.Get("minimal"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.rootfs(child), "bin/busybox")); err != nil {
		t.Fatalf("child lost its rootfs: %v", err)
	}
	if err := e.m.Delete("minimal", inUse); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
}

func TestCrashRecovery(t *testing.T) {
	e := newTestEnv(t)
	// Fake a build that was running when the process died: a building
	// record, a half-written work volume and a log.
	id := strings.Repeat("ab", 16)
	rec := &Template{Name: "crashed", ID: id, From: "minimal", State: StateBuilding, RootfsVolume: rootfsVolume(id), CreatedAt: time.Now()}
	if err := e.m.store.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	if err := e.m.store.saveNames(map[string]string{"crashed": id}); err != nil {
		t.Fatal(err)
	}
	appendLogLine(e.m.store.logPath(id), "[1/2] minimal: busybox")
	work, err := e.pool.Create(workVolume(id))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "partial"), []byte("x"), 0o644)
	// A stray work volume with no record at all.
	if _, err := e.pool.Create("templates/" + strings.Repeat("cd", 16) + workSuffix); err != nil {
		t.Fatal(err)
	}
	e.m.Close()

	e.m = e.newManager(t)
	got, err := e.m.Get("crashed")
	if err != nil || got.State != StateFailed || got.Reason != "interrupted by restart" {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	if vols, _ := e.pool.List("templates"); len(vols) != 0 {
		t.Fatalf("partial volumes left: %v", vols)
	}
	lines, done, _ := e.m.Logs("crashed", 0)
	if !done || lines[len(lines)-1] != "build failed: interrupted by restart" {
		t.Fatalf("log after recovery: %q", lines)
	}
	if _, err := e.m.Wait(context.Background(), "crashed"); !errors.Is(err, ErrBuildFailed) {
		t.Fatalf("Wait on failed: %v", err)
	}

	// A ready template whose volume vanished is marked failed and rebuilt
	// by the next build.
	r, _ := Builtin("minimal")
	tpl, _ := e.build(t, "", r, "")
	e.m.Close()
	if err := e.pool.Delete(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	e.m = e.newManager(t)
	if got, _ := e.m.Get("minimal"); got.State != StateFailed {
		t.Fatalf("template with missing volume: %+v", got)
	}
	again, progress := e.build(t, "", r, "")
	if again.ID != tpl.ID || again.State != StateReady || strings.Contains(progress, "up to date") {
		t.Fatalf("rebuild after wipe: %+v\n%s", again, progress)
	}
}

// TestDebianBuild builds the built-in base template: the bootstrap stage
// with debootstrap on the host, then the recipe's packages and steps in
// the (here fake) build sandbox. It downloads packages, so it runs only
// with SPACE_TEST_DEBIAN=1; test/e2e builds base in real sandboxes.
func TestDebianBuild(t *testing.T) {
	if testing.Short() || os.Getenv("SPACE_TEST_DEBIAN") != "1" {
		t.Skip("set SPACE_TEST_DEBIAN=1 (and no -short) to run the debootstrap build (1-2 min, needs the Debian mirror)")
	}
	e := newTestEnv(t)
	r, _ := Builtin("base")
	start := time.Now()
	tpl, progress := e.build(t, "", r, "")
	t.Logf("base build took %s, %d MiB", time.Since(start).Round(time.Second), tpl.SizeBytes>>20)
	if tpl.User != "user" || tpl.Workdir != "/home/user" || tpl.Env["LANG"] != "C.UTF-8" {
		t.Fatalf("record %+v", tpl)
	}
	if !strings.Contains(progress, "bootstrap stage: debootstrap --variant=minbase bookworm") || !strings.Contains(progress, "apt-get install bash") {
		t.Fatalf("progress:\n%s", progress)
	}
	root := e.rootfs(tpl)
	for _, p := range []string{"usr/bin/python3", "usr/bin/git", "usr/bin/curl", "usr/bin/sudo", "bin/bash", ".space"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("missing /%s: %v", p, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "var/lib/apt/lists")); len(entries) > 2 {
		t.Errorf("apt lists not cleaned: %d entries", len(entries))
	}
	// The stage is kept: a second Debian recipe snapshots it.
	if !e.pool.Exists(e.m.bootstrapVolume("bookworm")) {
		t.Fatal("no bootstrap stage volume")
	}
	_, progress = e.build(t, "other", mustParse(t, "from: debian:bookworm\nrun: [true]\n"), "")
	if !strings.Contains(progress, "using the bootstrap stage") {
		t.Fatalf("stage not reused:\n%s", progress)
	}
}
