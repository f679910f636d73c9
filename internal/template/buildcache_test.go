package template

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newCachedEnv is a test env (its own data dir and pool) whose manager
// keeps finished builds in cache and trusts testCA.
func newCachedEnv(t *testing.T, cache string) *testEnv {
	t.Helper()
	e := newTestEnv(t)
	e.m.Close()
	m, err := NewManager(Config{DataDir: e.dataDir, Volumes: e.pool, Logf: t.Logf, Sandboxes: e.boxes,
		BuildCache: cache, TrustedCA: []byte(testCA)})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	return e
}

// A build is made once per host: a second data directory receives the
// cached root volume, with every file the build wrote, instead of
// booting a build sandbox; a broken entry is built again and replaced.
func TestBuildCacheAcrossDataDirs(t *testing.T) {
	cache := t.TempDir()
	recipe := mustParse(t, "from: minimal\nrun: ['echo step ran']\n")

	first := newCachedEnv(t, cache)
	built, progress := first.build(t, "child", recipe, "")
	if len(first.boxes.started) != 1 || strings.Contains(progress, "build cache") {
		t.Fatalf("the first build did not build (sandboxes %v):\n%s", first.boxes.started, progress)
	}
	entry := filepath.Join(cache, built.ID+cacheSuffix)
	if fi, err := os.Stat(entry); err != nil || fi.Size() == 0 {
		t.Fatalf("no cache entry for %s: %v", built.ID, err)
	}

	second := newCachedEnv(t, cache)
	got, progress := second.build(t, "child", recipe, "")
	if got.ID != built.ID || got.State != StateReady || got.SizeBytes <= 0 {
		t.Fatalf("cached build record %+v, want ready %s", got, built.ID)
	}
	if len(second.boxes.started) != 0 {
		t.Fatalf("a cached build booted build sandboxes %v", second.boxes.started)
	}
	if !strings.Contains(progress, "received from the build cache") {
		t.Errorf("progress does not say the build came from the cache:\n%s", progress)
	}
	for _, f := range []string{"bin/busybox", caCertPath[1:]} {
		want, err := os.ReadFile(filepath.Join(first.rootfs(built), f))
		if err != nil {
			t.Fatal(err)
		}
		if have, err := os.ReadFile(filepath.Join(second.rootfs(got), f)); err != nil || string(have) != string(want) {
			t.Errorf("cached rootfs %s: %d bytes, %v; want the built %d bytes", f, len(have), err, len(want))
		}
	}
	if err := os.WriteFile(filepath.Join(second.rootfs(got), "probe"), nil, 0o644); err == nil {
		t.Error("the cached rootfs is writable")
	}

	// A torn entry is no template: the third builds, and mends the entry.
	if err := os.WriteFile(entry, []byte("not a btrfs stream"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := newCachedEnv(t, cache)
	mended, progress := third.build(t, "child", recipe, "")
	if mended.State != StateReady || len(third.boxes.started) != 1 || !strings.Contains(progress, "does not receive, building instead") {
		t.Fatalf("build over a broken entry: %+v, sandboxes %v:\n%s", mended, third.boxes.started, progress)
	}
	if fi, err := os.Stat(entry); err != nil || fi.Size() < 1000 {
		t.Fatalf("the broken entry was not replaced: %v", err)
	}
}

func TestBuildCacheDropsStaleEntries(t *testing.T) {
	cache := t.TempDir()
	old := time.Now().Add(-buildCacheMaxAge - time.Hour)
	files := map[string]time.Time{
		"aaaa" + cacheSuffix:                       old,
		"bbbb" + cacheSuffix:                       time.Now(),
		"cccc" + cacheSuffix + partialMarker + "x": time.Now().Add(-2 * time.Hour),
		"dddd" + cacheSuffix + partialMarker + "y": time.Now(),
	}
	for name, at := range files {
		p := filepath.Join(cache, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manager{cfg: Config{BuildCache: cache}}
	if err := m.openBuildCache(); err != nil {
		t.Fatal(err)
	}
	for name, keep := range map[string]bool{"aaaa" + cacheSuffix: false, "bbbb" + cacheSuffix: true,
		"cccc" + cacheSuffix + partialMarker + "x": false, "dddd" + cacheSuffix + partialMarker + "y": true} {
		if _, err := os.Stat(filepath.Join(cache, name)); (err == nil) != keep {
			t.Errorf("%s: kept %v, want %v", name, err == nil, keep)
		}
	}
}

// Two servers of one host building the same ID: the second waits for the
// first one's lock and receives its result, booting no build sandbox of
// its own (the test processes of one run share a cache this way).
func TestBuildCacheOneBuildOfAnIDPerHost(t *testing.T) {
	recipe := mustParse(t, "from: minimal\nrun: ['echo step ran']\n")
	// The ID, and the entry the other build will have made.
	elsewhere := t.TempDir()
	built, _ := newCachedEnv(t, elsewhere).build(t, "child", recipe, "")

	cache := t.TempDir()
	other, err := os.OpenFile(filepath.Join(cache, built.ID+cacheSuffix+lockSuffix), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	waiter := newCachedEnv(t, cache)
	progress := &watchedWriter{want: "waiting for it", seen: make(chan struct{})}
	type result struct {
		tpl *Template
		err error
	}
	done := make(chan result, 1)
	go func() {
		tpl, err := waiter.m.Build(context.Background(), "child", recipe, Source{HostPaths: true}, progress)
		done <- result{tpl, err}
	}()
	select {
	case <-progress.seen:
	case r := <-done:
		t.Fatalf("the build did not wait for the lock another build holds: %+v, %v\n%s", r.tpl, r.err, progress)
	case <-time.After(time.Minute):
		t.Fatalf("the build does not say it waits:\n%s", progress)
	}
	// The other build finishes: its entry in place, then its lock dropped.
	src, err := os.Open(filepath.Join(elsewhere, built.ID+cacheSuffix))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(cache, built.ID+cacheSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	other.Close()
	r := <-done
	if r.err != nil || r.tpl.ID != built.ID || r.tpl.State != StateReady {
		t.Fatalf("build after the wait: %+v, %v\n%s", r.tpl, r.err, progress)
	}
	if len(waiter.boxes.started) != 0 || !strings.Contains(progress.String(), "received from the build cache") {
		t.Fatalf("the waiting build built (sandboxes %v) instead of receiving:\n%s", waiter.boxes.started, progress)
	}
}

// watchedWriter is a progress writer that closes seen once want was
// written.
type watchedWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Past its bound the cache drops its least recently used entries, and
// only whole entries count: partial writes and lock files stay.
func TestBuildCacheKeepsToItsBound(t *testing.T) {
	cache := t.TempDir()
	now := time.Now()
	files := []struct {
		name string
		size int
		age  time.Duration
		keep bool
	}{
		{"oldest" + cacheSuffix, 400, 3 * time.Hour, false},
		{"older" + cacheSuffix, 400, 2 * time.Hour, false},
		{"recent" + cacheSuffix, 400, time.Hour, true},
		{"newest" + cacheSuffix, 400, 0, true},
		{"oldest" + cacheSuffix + lockSuffix, 0, 3 * time.Hour, true},
		{"being-written" + cacheSuffix + partialMarker + "z", 5000, 0, true},
	}
	for _, f := range files {
		p := filepath.Join(cache, f.name)
		if err := os.WriteFile(p, make([]byte, f.size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manager{cfg: Config{BuildCache: cache, BuildCacheMaxBytes: 1000}}
	if err := m.openBuildCache(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(cache, f.name)); (err == nil) != f.keep {
			t.Errorf("%s: kept %v, want %v", f.name, err == nil, f.keep)
		}
	}
}

// A lock that cannot be taken (here: its path is a directory) costs at
// most a second build of the ID; the build goes on and says so.
func TestBuildCacheBuildsWhenItCannotLock(t *testing.T) {
	recipe := mustParse(t, "from: minimal\nrun: ['echo step ran']\n")
	id, _ := newCachedEnv(t, t.TempDir()).build(t, "child", recipe, "")
	cache := t.TempDir()
	if err := os.Mkdir(filepath.Join(cache, id.ID+cacheSuffix+lockSuffix), 0o700); err != nil {
		t.Fatal(err)
	}
	e := newCachedEnv(t, cache)
	got, progress := e.build(t, "child", recipe, "")
	if got.State != StateReady || len(e.boxes.started) != 1 || !strings.Contains(progress, "not locked, building without it") {
		t.Fatalf("build without its lock: %+v, sandboxes %v:\n%s", got, e.boxes.started, progress)
	}
	if strings.Contains(progress, cache) {
		t.Errorf("the build's log names a host path:\n%s", progress)
	}
}
