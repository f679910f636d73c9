package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/envdversion"
	"github.com/space-platform/space/internal/agent/gen/filesystempb"
)

// upload POSTs data to path as an SDK does (octet-stream when raw, else
// multipart), with extra headers, and returns the status and body.
func (e *testEnv) upload(t *testing.T, path, user string, raw bool, data string, headers map[string]string) (int, []byte) {
	t.Helper()
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	var req *http.Request
	if raw {
		req, _ = http.NewRequest(http.MethodPost, e.filesURL(q), strings.NewReader(data))
		req.Header.Set("Content-Type", "application/octet-stream")
	} else {
		body, ctype := multipartBody([]uploadFile{{path, strings.NewReader(data)}})
		req, _ = http.NewRequest(http.MethodPost, e.filesURL(q), body)
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set(accessTokenHeader, testToken)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, body := doRequest(t, e.h1Client, req)
	return resp.StatusCode, body
}

// skipWithoutUserXattrs skips where the test's temp dir cannot hold user
// xattrs (some CI filesystems); the agent then keeps no metadata by design.
func skipWithoutUserXattrs(t *testing.T, dir string) {
	t.Helper()
	probe := filepath.Join(dir, ".xattr-probe")
	writeFile(t, probe, "")
	defer os.Remove(probe)
	if err := unix.Setxattr(probe, "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("%s holds no user xattrs: %v", dir, err)
	}
}

func xattrsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	names, err := listxattr(path)
	if err != nil {
		t.Fatalf("list xattrs of %s: %v", path, err)
	}
	out := map[string]string{}
	for _, n := range names {
		v, err := getxattr(path, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = string(v)
	}
	return out
}

// TestFileMetadataThroughUploadStatListMoveAndWatch follows one file's
// metadata through every surface the SDKs read it from, as the user
// "tester" (the agent writes the xattrs with the user's own rights).
func TestFileMetadataThroughUploadStatListMoveAndWatch(t *testing.T) {
	env := newTestEnv(t)
	skipWithoutUserXattrs(t, env.userHome)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fsc := env.fsClient(clientOptions{user: "tester", h2c: true})
	dir := filepath.Join(env.userHome, "docs")
	mustMkdir(t, dir)
	if err := os.Chown(dir, testUID, testUID); err != nil {
		t.Fatal(err)
	}

	watch, err := fsc.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !watch.Receive() || watch.Msg().GetStart() == nil {
		t.Fatalf("first event must be start: %v %v", watch.Msg(), watch.Err())
	}

	want := map[string]string{"author": "mish", "purpose": "upload report", "empty": ""}
	for _, raw := range []bool{false, true} {
		path := filepath.Join(dir, "report.txt")
		status, body := env.upload(t, "docs/report.txt", "tester", raw, "v1", map[string]string{
			// Header names are case-insensitive: keys arrive lowercased.
			"X-Metadata-Author": "mish", "x-metadata-PURPOSE": "upload report", "X-Metadata-Empty": "",
		})
		if status != http.StatusOK {
			t.Fatalf("upload (raw %v): %d %s", raw, status, body)
		}
		var infos []fileWriteInfo
		if err := json.Unmarshal(body, &infos); err != nil || len(infos) != 1 {
			t.Fatalf("answer %s: %v", body, err)
		}
		if infos[0].Path != path || !maps.Equal(infos[0].Metadata, want) {
			t.Errorf("upload answer (raw %v) %+v, want metadata %v", raw, infos[0], want)
		}
	}
	path := filepath.Join(dir, "report.txt")
	assertOwner(t, path, testUID)
	// On disk: the user.e2b. namespace, nothing else.
	if got := xattrsOf(t, path); !maps.Equal(got, map[string]string{
		"user.e2b.author": "mish", "user.e2b.purpose": "upload report", "user.e2b.empty": "",
	}) {
		t.Errorf("xattrs on disk %v", got)
	}

	// A user.* attribute of another tool is neither shown nor touched.
	if err := unix.Setxattr(path, "user.other-tool", []byte("keep me"), 0); err != nil {
		t.Fatal(err)
	}
	st, err := fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "docs/report.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetEntry().GetMetadata(); !maps.Equal(got, want) {
		t.Errorf("stat metadata %v, want %v", got, want)
	}
	list, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "~"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Msg.GetEntries() {
		if e.GetPath() == path && !maps.Equal(e.GetMetadata(), want) {
			t.Errorf("list entry %v", e)
		}
	}
	depth2, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "~", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range depth2.Msg.GetEntries() {
		if e.GetPath() == path {
			found = maps.Equal(e.GetMetadata(), want)
		} else if len(e.GetMetadata()) != 0 {
			t.Errorf("%s has metadata %v", e.GetPath(), e.GetMetadata())
		}
	}
	if !found {
		t.Errorf("list depth 2 lacks %s with its metadata: %v", path, depth2.Msg.GetEntries())
	}

	// The watch saw the uploads with the entry, metadata included (the
	// CREATE may come before the xattrs are set; the last WRITE after).
	sawMetadata := false
	for !sawMetadata {
		if !watch.Receive() {
			t.Fatalf("watch ended: %v", watch.Err())
		}
		ev := watch.Msg().GetFilesystem()
		if ev.GetName() == "report.txt" && ev.GetEntry() != nil && maps.Equal(ev.GetEntry().GetMetadata(), want) {
			sawMetadata = true
		}
	}

	// Rename keeps the metadata (it belongs to the inode).
	moved, err := fsc.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "docs/report.txt", Destination: "archive/2026/report.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := moved.Msg.GetEntry().GetMetadata(); !maps.Equal(got, want) {
		t.Errorf("moved entry metadata %v", got)
	}

	// Overwrite replaces the whole set: a new set drops the missing keys...
	newPath := filepath.Join(env.userHome, "archive", "2026", "report.txt")
	status, body := env.upload(t, newPath, "tester", true, "v2", map[string]string{"X-Metadata-Author": "alice"})
	if status != http.StatusOK {
		t.Fatalf("overwrite: %d %s", status, body)
	}
	if got := readMetadata(newPath); !maps.Equal(got, map[string]string{"author": "alice"}) {
		t.Errorf("after overwrite with a new set: %v", got)
	}
	// ...and an upload without any (every older SDK) clears it, answering
	// exactly the three keys Python 2.21 accepts.
	status, body = env.upload(t, newPath, "tester", false, "v3", nil)
	if status != http.StatusOK {
		t.Fatalf("overwrite without metadata: %d %s", status, body)
	}
	decodeWriteInfos(t, body)
	if got := readMetadata(newPath); got != nil {
		t.Errorf("after overwrite without metadata: %v", got)
	}
	if v, err := getxattr(newPath, "user.other-tool"); err != nil || string(v) != "keep me" {
		t.Errorf("other tool's xattr: %q %v", v, err)
	}
	if b, _ := os.ReadFile(newPath); string(b) != "v3" {
		t.Errorf("content %q", b)
	}
}

// TestFileMetadataRefusedUpFront: a set the SDK would not send or an xattr
// could not hold is a 400 with envd's JSON body, and no file is written.
func TestFileMetadataRefusedUpFront(t *testing.T) {
	env := newTestEnv(t)
	cases := map[string]map[string]string{
		"key too long":     {"X-Metadata-" + strings.Repeat("k", maxMetadataKeyLen+1): "v"},
		"set too large":    {"X-Metadata-A": strings.Repeat("a", 2100), "X-Metadata-B": strings.Repeat("b", 2100)},
		"value not ascii":  {"X-Metadata-Name": "caf\xc3\xa9"},
		"value with a tab": {"X-Metadata-Name": "a\tb"},
	}
	for name, headers := range cases {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(env.dir, strings.ReplaceAll(name, " ", "-"))
			status, body := env.upload(t, dst, "", true, "data", headers)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d %s", status, body)
			}
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Code != 400 || !strings.Contains(e.Message, "metadata") {
				t.Errorf("body %s (%v)", body, err)
			}
			if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused upload left %s: %v", dst, err)
			}
		})
	}
	// Exactly at the bounds is fine.
	key := strings.Repeat("k", maxMetadataKeyLen)
	if err := validateMetadata(map[string]string{key: strings.Repeat("v", maxMetadataBytes-len(metadataXattrPrefix)-len(key))}); err != nil {
		t.Errorf("set at the bounds: %v", err)
	}
}

// TestFileMetadataOnAFilesystemWithoutXattrs: where xattrs cannot be kept
// (ramfs here; procfs, sysfs or FUSE in a sandbox) the data is written, the
// answer shows no metadata rather than pairs that were not kept, and later
// uploads without metadata are unaffected.
func TestFileMetadataOnAFilesystemWithoutXattrs(t *testing.T) {
	env := newTestEnv(t)
	mnt := filepath.Join(env.dir, "ramfs")
	mustMkdir(t, mnt)
	if err := unix.Mount("ramfs", mnt, "ramfs", 0, ""); err != nil {
		t.Skipf("mount ramfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	if err := unix.Setxattr(mnt, "user.probe", []byte("1"), 0); !isXattrUnsupported(err) {
		t.Skipf("ramfs here keeps user xattrs (%v)", err)
	}
	dst := filepath.Join(mnt, "f.txt")
	for _, headers := range []map[string]string{{"X-Metadata-Author": "mish"}, nil} {
		status, body := env.upload(t, dst, "", true, "kept", headers)
		if status != http.StatusOK {
			t.Fatalf("upload %v: %d %s", headers, status, body)
		}
		decodeWriteInfos(t, body) // exactly name, type, path: no metadata claimed
		if b, err := os.ReadFile(dst); err != nil || string(b) != "kept" {
			t.Errorf("content %q %v", b, err)
		}
	}
	st, err := env.fsClient(clientOptions{}).Stat(context.Background(), connect.NewRequest(&filesystempb.StatRequest{Path: dst}))
	if err != nil || st.Msg.GetEntry().GetMetadata() != nil {
		t.Errorf("stat %v %v", st, err)
	}
}

// TestWatchOfANetworkFilesystemNeedsConsent: both watch RPCs refuse a
// directory on NFS or FUSE with invalid_argument unless allowNetworkMounts
// asks, and a local directory is watched either way.
func TestWatchOfANetworkFilesystemNeedsConsent(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fsc := env.fsClient(clientOptions{})
	local := filepath.Join(env.dir, "local")
	remote := filepath.Join(env.dir, "nfs")
	mustMkdir(t, local)
	mustMkdir(t, remote)
	real := filesystemMagic
	t.Cleanup(func() { filesystemMagic = real })
	filesystemMagic = func(dir string) (int64, error) {
		if dir == remote {
			return 0x6969, nil // NFS_SUPER_MAGIC
		}
		return real(dir)
	}

	watch := func(dir string, allow bool) error {
		created, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir, AllowNetworkMounts: allow}))
		if err != nil {
			return err
		}
		_, err = fsc.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: created.Msg.GetWatcherId()}))
		return err
	}
	stream := func(dir string, allow bool) error {
		s, err := fsc.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir, AllowNetworkMounts: allow}))
		if err != nil {
			return err
		}
		defer s.Close()
		if !s.Receive() {
			return s.Err()
		}
		return nil
	}
	for name, rpc := range map[string]func(string, bool) error{"CreateWatcher": watch, "WatchDir": stream} {
		for _, allow := range []bool{false, true} {
			if err := rpc(local, allow); err != nil {
				t.Errorf("%s local (allow %v): %v", name, allow, err)
			}
		}
		err := rpc(remote, false)
		if connectCode(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "NFS") || !strings.Contains(err.Error(), "allowNetworkMounts") {
			t.Errorf("%s on NFS without consent: %v", name, err)
		}
		if err := rpc(remote, true); err != nil {
			t.Errorf("%s on NFS with consent: %v", name, err)
		}
	}
	if name, err := onNetworkFilesystem("/proc"); err != nil || name != "" {
		t.Errorf("/proc: %q %v", name, err)
	}
}

// TestAgentReportsItsEnvdVersion: /init answers X-Envd-Version (as envd
// does, even when the call is refused) and so does /health.
func TestAgentReportsItsEnvdVersion(t *testing.T) {
	env := newTestEnv(t)
	for _, r := range []struct{ method, path string }{{http.MethodGet, "/health"}, {http.MethodPost, "/init"}} {
		req, _ := http.NewRequest(r.method, env.baseURL+r.path, bytes.NewReader([]byte("{}")))
		resp, _ := doRequest(t, env.h1Client, req) // no token: /init is refused
		if got := resp.Header.Get(envdversion.Header); got != envdversion.Version {
			t.Errorf("%s %s (%d): %s = %q", r.method, r.path, resp.StatusCode, envdversion.Header, got)
		}
	}
}
