package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
)

func TestFilesystemOperations(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	fsc := env.fsClient(clientOptions{user: "tester", h2c: true})

	// MakeDir: relative to home, nested, owned by the user; twice → already_exists.
	mk, err := fsc.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "proj/src"}))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(env.userHome, "proj", "src")
	if e := mk.Msg.GetEntry(); e.GetPath() != dir || e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || e.GetOwner() != "tester" || e.GetGroup() != "testers" {
		t.Errorf("makedir entry %v", e)
	}
	assertOwner(t, filepath.Join(env.userHome, "proj"), testUID)
	_, err = fsc.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "~/proj/src"}))
	if connectCode(err) != connect.CodeAlreadyExists {
		t.Errorf("second makedir: %v", err)
	}

	writeFile(t, filepath.Join(dir, "main.go"), "package main\n")
	if err := os.Symlink("main.go", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(env.userHome, filepath.Join(dir, "homelink")); err != nil {
		t.Fatal(err)
	}

	st, err := fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "~/proj/src/main.go"}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetName() != "main.go" || e.GetSize() != 13 || e.GetPermissions() != "-rw-r--r--" || e.GetMode() != 0o644 ||
		e.GetOwner() != "root" || time.Since(e.GetModifiedTime().AsTime()) > time.Minute {
		t.Errorf("stat %v", e)
	}
	st, err = fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: filepath.Join(dir, "homelink")}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.GetEntry(); e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || e.GetSymlinkTarget() != env.userHome {
		t.Errorf("symlink to dir %v", e)
	}
	_, err = fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/no/such/file"}))
	if connectCode(err) != connect.CodeNotFound {
		t.Errorf("stat missing: %v", err)
	}

	// ListDir depth 1 and 2.
	list := func(path string, depth uint32) map[string]*filesystempb.EntryInfo {
		t.Helper()
		resp, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: path, Depth: depth}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*filesystempb.EntryInfo{}
		for _, e := range resp.Msg.GetEntries() {
			out[e.GetPath()] = e
		}
		return out
	}
	if got := list("proj", 1); len(got) != 1 || got[dir] == nil {
		t.Errorf("depth 1: %v", keys(got))
	}
	got := list("proj", 2)
	if len(got) != 4 || got[filepath.Join(dir, "link")].GetType() != filesystempb.FileType_FILE_TYPE_FILE ||
		got[filepath.Join(dir, "link")].GetSymlinkTarget() != filepath.Join(dir, "main.go") {
		t.Errorf("depth 2: %v", keys(got))
	}
	if _, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "proj/src/main.go"})); connectCode(err) != connect.CodeInvalidArgument {
		t.Errorf("listdir on file: %v", err)
	}

	// Move into a new directory, then Remove recursively.
	mv, err := fsc.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "proj/src/main.go", Destination: "proj/moved/app.go"}))
	if err != nil {
		t.Fatal(err)
	}
	if mv.Msg.GetEntry().GetPath() != filepath.Join(env.userHome, "proj", "moved", "app.go") {
		t.Errorf("move entry %v", mv.Msg.GetEntry())
	}
	if _, err := fsc.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "nope", Destination: "x"})); connectCode(err) != connect.CodeNotFound {
		t.Errorf("move missing: %v", err)
	}
	if _, err := fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "proj"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.userHome, "proj")); !os.IsNotExist(err) {
		t.Errorf("proj still exists: %v", err)
	}
}

// E2B's ListDir answers in one message, so past maxListDirEntries it
// refuses the tree (resource_exhausted, which the Connect protocol sends
// as 429 through the proxy) instead of building an answer of unbounded
// size; up to the bound it answers whole.
func TestListDirRefusesTreesPastTheBound(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	fsc := env.fsClient(clientOptions{h2c: true})
	dir := filepath.Join(env.rootHome, "huge")
	mustMkdir(t, dir)
	for i := range maxListDirEntries {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	resp, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: dir, Depth: 1}))
	if err != nil || len(resp.Msg.GetEntries()) != maxListDirEntries {
		t.Fatalf("ListDir of exactly %d entries: %d entries, %v", maxListDirEntries, len(resp.Msg.GetEntries()), err)
	}
	writeFile(t, filepath.Join(dir, "one-more"), "")
	_, err = fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: dir, Depth: 1}))
	if connectCode(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "pages") {
		t.Errorf("ListDir of %d entries: %v, want resource_exhausted pointing at paged listings", maxListDirEntries+1, err)
	}
}

func keys(m map[string]*filesystempb.EntryInfo) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func assertOwner(t *testing.T, path string, uid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Sys().(*syscall.Stat_t).Uid; got != uid {
		t.Errorf("%s owned by %d, want %d", path, got, uid)
	}
}

func TestWatchDirStreamsRecursiveEvents(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := filepath.Join(env.dir, "watched")
	mustMkdir(t, filepath.Join(root, "existing"))
	req := connect.NewRequest(&filesystempb.WatchDirRequest{Path: root, Recursive: true, IncludeEntry: true})
	req.Header().Set(keepaliveHeader, "1")
	stream, err := env.fsClient(clientOptions{h2c: true}).WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event must be start: %v %v", stream.Msg(), stream.Err())
	}
	writeFile(t, filepath.Join(root, "existing", "deep.txt"), "x")
	mustMkdir(t, filepath.Join(root, "newdir"))

	seen := map[string]bool{}
	sawEntry, keepalive := false, false
	for !(seen["CREATE existing/deep.txt"] && seen["CREATE newdir"] && seen["CREATE newdir/inner.txt"] && keepalive) {
		if !stream.Receive() {
			t.Fatalf("stream ended: %v; seen %v", stream.Err(), seen)
		}
		if stream.Msg().GetKeepalive() != nil {
			keepalive = true
			continue
		}
		ev := stream.Msg().GetFilesystem()
		name := ev.GetType().String()[len("EVENT_TYPE_"):] + " " + ev.GetName()
		seen[name] = true
		if ev.GetEntry() != nil {
			sawEntry = true
		}
		if name == "CREATE newdir" {
			// Give the watcher a moment to add the new directory.
			time.Sleep(100 * time.Millisecond)
			writeFile(t, filepath.Join(root, "newdir", "inner.txt"), "y")
		}
	}
	if !sawEntry {
		t.Error("include_entry set but no event carried an entry")
	}
}

func TestPolledWatcher(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	fsc := env.fsClient(clientOptions{})
	root := filepath.Join(env.dir, "polled")
	mustMkdir(t, root)
	created, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: root}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWatcherId()
	writeFile(t, filepath.Join(root, "a.txt"), "a")
	var events []*filesystempb.FilesystemEvent
	eventually(t, "polled create event", func() bool {
		resp, err := fsc.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, resp.Msg.GetEvents()...)
		for _, e := range events {
			if e.GetName() == "a.txt" && e.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
				return true
			}
		}
		return false
	})
	if _, err := fsc.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = fsc.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
	if connectCode(err) != connect.CodeNotFound {
		t.Errorf("events of removed watcher: %v", err)
	}
	_, err = fsc.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: filepath.Join(root, "missing")}))
	if connectCode(err) != connect.CodeNotFound {
		t.Errorf("watch missing dir: %v", err)
	}
}

// Moving the root directory, or onto it, is the client's mistake: 400
// (invalid_argument), not an internal error the proxy answers 502 for.
func TestMoveRootRefused(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	fsc := env.fsClient(clientOptions{user: "tester", h2c: true})
	writeFile(t, filepath.Join(env.userHome, "f"), "x")
	for _, m := range []*filesystempb.MoveRequest{
		{Source: "/", Destination: "elsewhere"},
		{Source: "/tmp/..", Destination: "elsewhere"},
		{Source: "f", Destination: "/"},
	} {
		_, err := fsc.Move(ctx, connect.NewRequest(m))
		if connectCode(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "root directory") {
			t.Errorf("move %s to %s: %v, want invalid_argument naming the root directory", m.Source, m.Destination, err)
		}
	}
}

// Removing the root directory is refused before anything is removed. (It
// is tested on refuseRoot, not through Remove: without the check, the
// test would empty whatever the test user may write.)
func TestRemoveRootRefused(t *testing.T) {
	for _, p := range []string{"/", "/tmp/..", "~/.."} {
		resolved, err := resolvePath(p, &userAccount{Home: "/home"})
		if err != nil {
			t.Fatal(err)
		}
		if err := refuseRoot("remove", resolved); connectCode(err) != connect.CodeInvalidArgument {
			t.Errorf("remove %s: %v, want invalid_argument", p, err)
		}
	}
	if err := refuseRoot("remove", "/tmp"); err != nil {
		t.Errorf("remove /tmp: %v", err)
	}
}
