package e2e

import (
	"bytes"
	"maps"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// TestE2BEnvd06PythonShapes replays what the Python SDK sends for the envd
// 0.6 surface, through the proxy into a real sandbox: a multipart write
// with X-Metadata-* headers (the Python guessed part type included), the
// metadata in the write answer, in Stat and ListDir over Connect JSON and
// in the native listing, the polled watcher of the sync SDK with includeEntry, and a write
// without metadata (Python 2.21), which clears the set and answers exactly
// WriteInfo's three keys.
func TestE2BEnvd06PythonShapes(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	if sb.EnvdVersion != "0.6.4" {
		t.Fatalf("envdVersion %q", sb.EnvdVersion)
	}
	h := envdHeaders(sb, "49983")
	h.Set("User-Agent", "e2b-python-sdk/2.25.0")

	if resp := connectUnary(t, "/filesystem.Filesystem/MakeDir", map[string]any{"path": "/tmp/py06"}, h); resp.status != http.StatusOK {
		t.Fatalf("MakeDir: %d %s", resp.status, resp.body)
	}
	watch := connectUnary(t, "/filesystem.Filesystem/CreateWatcher", map[string]any{"path": "/tmp/py06", "includeEntry": true}, h)
	if watch.status != http.StatusOK {
		t.Fatalf("CreateWatcher: %d %s", watch.status, watch.body)
	}
	var watcher struct {
		WatcherID string `json:"watcherId"`
	}
	watch.json(t, &watcher)

	write := func(data string, metadata map[string]string) e2bResponse {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		part, _ := mw.CreatePart(textproto.MIMEHeader{
			"Content-Disposition": {`form-data; name="file"; filename="/tmp/py06/notes.txt"`},
			"Content-Type":        {"text/plain"},
		})
		part.Write([]byte(data))
		mw.Close()
		wh := h.Clone()
		for k, v := range metadata {
			wh.Set("X-Metadata-"+k, v)
		}
		return proxyRequest(t, http.MethodPost, "/files?path=%2Ftmp%2Fpy06%2Fnotes.txt", mw.FormDataContentType(), &body, wh)
	}
	want := map[string]string{"author": "py", "stage": "draft"}
	resp := write("first", map[string]string{"author": "py", "Stage": "draft"})
	var infos []struct {
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	resp.json(t, &infos)
	if resp.status != http.StatusOK || len(infos) != 1 || !maps.Equal(infos[0].Metadata, want) {
		t.Fatalf("write with metadata: %d %s", resp.status, resp.body)
	}

	type entry struct {
		Name     string            `json:"name"`
		Type     string            `json:"type"`
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	var stat struct{ Entry entry }
	resp = connectUnary(t, "/filesystem.Filesystem/Stat", map[string]any{"path": "/tmp/py06/notes.txt"}, h)
	resp.json(t, &stat)
	if resp.status != http.StatusOK || !maps.Equal(stat.Entry.Metadata, want) || stat.Entry.Type != "FILE_TYPE_FILE" {
		t.Fatalf("Stat: %d %s", resp.status, resp.body)
	}
	var list struct{ Entries []entry }
	resp = connectUnary(t, "/filesystem.Filesystem/ListDir", map[string]any{"path": "/tmp/py06", "depth": 1}, h)
	resp.json(t, &list)
	if resp.status != http.StatusOK || len(list.Entries) != 1 || !maps.Equal(list.Entries[0].Metadata, want) {
		t.Fatalf("ListDir: %d %s", resp.status, resp.body)
	}

	// The native API lists the same metadata (ListDir and ListDirPage both
	// go through the agent's paged /list).
	native, err := env.client.ListDir(testContext(t), sb.SandboxID, "/tmp/py06", 1)
	if err != nil || len(native.Entries) != 1 || !maps.Equal(native.Entries[0].Metadata, want) {
		t.Fatalf("native listing: %+v, %v", native, err)
	}

	// The sync SDK polls; an event of the write carries the entry and,
	// once the xattrs are set, the metadata.
	var sawEntry bool
	for deadline := time.Now().Add(10 * time.Second); !sawEntry && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var events struct {
			Events []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Entry *entry `json:"entry"`
			}
		}
		resp = connectUnary(t, "/filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": watcher.WatcherID}, h)
		resp.json(t, &events)
		for _, e := range events.Events {
			if e.Name == "notes.txt" && e.Entry != nil && e.Entry.Path == "/tmp/py06/notes.txt" && maps.Equal(e.Entry.Metadata, want) {
				sawEntry = true
			}
		}
	}
	if !sawEntry {
		t.Error("no polled event carried the entry with its metadata")
	}
	connectUnary(t, "/filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": watcher.WatcherID}, h)

	// Python 2.21 writes without metadata: the answer is exactly WriteInfo.
	resp = write("second", nil)
	var plain []map[string]any
	resp.json(t, &plain)
	if resp.status != http.StatusOK || len(plain) != 1 || len(plain[0]) != 3 {
		t.Fatalf("write without metadata: %d %s", resp.status, resp.body)
	}
	resp = connectUnary(t, "/filesystem.Filesystem/Stat", map[string]any{"path": "/tmp/py06/notes.txt"}, h)
	if resp.status != http.StatusOK || strings.Contains(string(resp.body), "metadata") {
		t.Fatalf("Stat after a write without metadata: %d %s", resp.status, resp.body)
	}

	// A set an xattr cannot hold: 400 with envd's body, the file untouched.
	resp = write("too big", map[string]string{"a": strings.Repeat("a", 3000), "b": strings.Repeat("b", 3000)})
	resp.wantError(t, http.StatusBadRequest, "metadata")
	if resp = proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Fpy06%2Fnotes.txt", "", nil, h); string(resp.body) != "second" {
		t.Errorf("after a refused write the file holds %q", resp.body)
	}
}
