package template

import (
	"bytes"
	"context"
	"errors"
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
	env := &testEnv{dataDir: dir, pool: pool}
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
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf})
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
	tpl, err := e.m.Build(context.Background(), name, r, baseDir, &progress)
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
	sub, err := e.m.Submit("minimal", r, "")
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
		p, err := e.m.plan(name, mustParse(t, y), dir)
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
	if _, err := e.m.plan("", mustParse(t, "from: minimal\n"), ""); err == nil {
		t.Fatal("plan without any name succeeded")
	}
	if _, err := e.m.plan("x", mustParse(t, recipe), ""); err == nil || !strings.Contains(err.Error(), "files") {
		t.Fatalf("files without a recipe dir: %v", err)
	}
	if _, err := e.m.plan("x", mustParse(t, "from: template:absent\n"), ""); !errors.Is(err, ErrNotFound) {
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
	for _, want := range []string{"[1/5] snapshot template minimal", "[2/5] run: echo hi > /etc/greeting", "[4/5] copy 2 file entries", "[5/5] finalize"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
	root := e.rootfs(child)
	check := map[string]string{
		"etc/greeting": "hi\n", "etc/foo": "bar\nproc\n", "etc/builder-uid": "0\n",
		"opt/app/main.sh": "#!/bin/sh\necho app\n", "opt/app/sub/data": "data",
	}
	for p, want := range check {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(got) != want {
			t.Errorf("/%s = %q, %v; want %q", p, got, err, want)
		}
	}
	if info, err := os.Stat(filepath.Join(root, "usr/local/bin/tool")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("tool mode: %v, %v", info.Mode(), err)
	}
	if target, _ := os.Readlink(filepath.Join(root, "opt/app/link")); target != "main.sh" {
		t.Errorf("symlink copied as %q", target)
	}
	// Build-time resolv.conf is restored, the parent is untouched.
	if got, _ := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); !strings.HasPrefix(string(got), "# placeholder") {
		t.Errorf("resolv.conf not restored: %q", got)
	}
	if _, err := os.Stat(filepath.Join(e.rootfs(parent), "etc/greeting")); !os.IsNotExist(err) {
		t.Errorf("child's step changed the parent: %v", err)
	}

	// A failing step fails the build, cleans its work volume and leaks
	// no mounts (checked at cleanup).
	bad := mustParse(t, "from: template:minimal\nrun: ['echo about to fail; exit 3']\n")
	_, err := e.m.Build(context.Background(), "bad", bad, "", nil)
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
			tpl, err := e.m.Submit("slow", r, "")
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

// TestDebianBuild builds the built-in base template with debootstrap. It
// downloads packages, so it runs only with SPACE_TEST_DEBIAN=1.
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
	if !strings.Contains(progress, "debootstrap --variant=minbase bookworm --include=") {
		t.Fatalf("progress:\n%s", progress)
	}
	root := e.rootfs(tpl)
	for _, p := range []string{"usr/bin/python3", "usr/bin/git", "usr/bin/curl", "usr/bin/sudo", "bin/bash", "home/user", ".space", "etc/sudoers.d/user"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("missing /%s: %v", p, err)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd:\n%s", passwd)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "var/lib/apt/lists")); len(entries) > 2 {
		t.Errorf("apt lists not cleaned: %d entries", len(entries))
	}

	// A child installing a package through apt-get in the chroot.
	child, progress := e.build(t, "child", mustParse(t, "from: template:base\npackages: [jq]\nrun: ['jq --version > /etc/jq-version']\n"), "")
	if !strings.Contains(progress, "apt-get install jq") {
		t.Fatalf("progress:\n%s", progress)
	}
	if _, err := os.Stat(filepath.Join(e.rootfs(child), "etc/jq-version")); err != nil {
		t.Fatal(err)
	}
}
