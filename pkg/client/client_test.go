package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// recordedRequest is what the fake server saw of one request.
type recordedRequest struct {
	method, path, rawQuery string
	header                 http.Header
	body                   []byte
}

// recordingServer answers every request with a canned response per
// "METHOD /path" and remembers the requests.
type recordingServer struct {
	mu        sync.Mutex
	requests  []recordedRequest
	responses map[string]cannedResponse
}

type cannedResponse struct {
	status      int
	contentType string
	body        string
}

func (s *recordingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, recordedRequest{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), body})
	resp, ok := s.responses[r.Method+" "+r.URL.EscapedPath()]
	s.mu.Unlock()
	if !ok {
		writeTestError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	if resp.contentType == "" {
		resp.contentType = "application/json"
	}
	w.Header().Set("Content-Type", resp.contentType)
	w.WriteHeader(resp.status)
	io.WriteString(w, resp.body)
}

func (s *recordingServer) last(t *testing.T) recordedRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("no request reached the server")
	}
	return s.requests[len(s.requests)-1]
}

func newRecordingServer(t *testing.T, responses map[string]cannedResponse) (*Client, *recordingServer) {
	t.Helper()
	rec := &recordingServer{responses: responses}
	return testClient(t, rec), rec
}

func TestCreateSandboxEncodesRequestAndAuth(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"POST /v1/sandboxes": {http.StatusAccepted, "", `{"id":"sb1","template":"base","state":"starting","vcpus":2}`},
	})
	sb, err := c.CreateSandbox(context.Background(), apiv1.CreateSandboxRequest{
		Template: "base", VCPUs: 2, Env: map[string]string{"A": "1"}, TimeoutS: 60,
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb1" || sb.State != apiv1.StateStarting || sb.VCPUs != 2 {
		t.Errorf("sandbox = %+v", sb)
	}
	req := rec.last(t)
	if got := req.header.Get("Authorization"); got != "Bearer test-key" {
		t.Errorf("Authorization = %q", got)
	}
	if got := req.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	var sent map[string]any
	if err := json.Unmarshal(req.body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent["template"] != "base" || sent["vcpus"] != float64(2) || sent["timeout_s"] != float64(60) {
		t.Errorf("body = %s", req.body)
	}
	if _, has := sent["memory_mb"]; has {
		t.Errorf("zero memory_mb should be omitted: %s", req.body)
	}
}

func TestListSandboxesQuery(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"GET /v1/sandboxes": {http.StatusOK, "", `{"sandboxes":[{"id":"a"},{"id":"b"}]}`},
	})
	list, err := c.ListSandboxes(context.Background(), ListOptions{State: "running", Metadata: map[string]string{"team": "a", "env": "dev"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].ID != "b" {
		t.Errorf("list = %+v", list)
	}
	if got, want := rec.last(t).rawQuery, "metadata.env=dev&metadata.team=a&state=running"; got != want {
		t.Errorf("query = %q, want %q", got, want)
	}
}

func TestErrorMapping(t *testing.T) {
	c, _ := newRecordingServer(t, map[string]cannedResponse{
		"GET /v1/sandboxes/gone":        {http.StatusNotFound, "", `{"code":404,"message":"sandbox gone not found"}`},
		"GET /v1/sandboxes/dead/wait":   {http.StatusConflict, "", `{"code":409,"message":"sandbox dead is failed: image missing"}`},
		"GET /v1/sandboxes/slow/wait":   {http.StatusRequestTimeout, "", `{"code":408,"message":"timed out"}`},
		"GET /v1/sandboxes/proxy":       {http.StatusBadGateway, "text/html", "<html>bad gateway</html>"},
		"GET /v1/sandboxes/empty":       {http.StatusInternalServerError, "", ""},
		"DELETE /v1/templates/in%20use": {http.StatusConflict, "", `{"code":409,"message":"template in use is used by 2 sandboxes"}`},
	})
	ctx := context.Background()

	_, err := c.GetSandbox(ctx, "gone")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Message != "sandbox gone not found" || !IsNotFound(err) || IsConflict(err) {
		t.Errorf("404: err = %#v", err)
	}
	if _, err := c.WaitSandbox(ctx, "dead", apiv1.StateRunning, time.Second); !IsConflict(err) || !strings.Contains(err.Error(), "image missing") {
		t.Errorf("409: err = %v", err)
	}
	if _, err := c.WaitSandbox(ctx, "slow", apiv1.StateRunning, time.Second); !IsTimeout(err) {
		t.Errorf("408: err = %v", err)
	}
	if _, err := c.GetSandbox(ctx, "proxy"); err == nil || err.Error() != "<html>bad gateway</html>" {
		t.Errorf("non-JSON body: err = %v", err)
	}
	if _, err := c.GetSandbox(ctx, "empty"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("empty body: err = %v", err)
	}
	if err := c.DeleteTemplate(ctx, "in use"); !IsConflict(err) {
		t.Errorf("escaped name: err = %v", err)
	}
}

func TestWaitSandboxQuery(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"GET /v1/sandboxes/sb1/wait": {http.StatusOK, "", `{"id":"sb1","state":"running"}`},
	})
	sb, err := c.WaitSandbox(context.Background(), "sb1", apiv1.StateRunning, 1500*time.Millisecond)
	if err != nil || sb.State != "running" {
		t.Fatalf("sb = %+v, err = %v", sb, err)
	}
	if got := rec.last(t).rawQuery; got != "state=running&timeout_s=2" {
		t.Errorf("query = %q", got)
	}
}

func TestSessionCalls(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"POST /v1/sandboxes/sb1/sessions":           {http.StatusCreated, "", `{"id":"s1","pid":42,"cmd":["cat"],"state":"running"}`},
		"POST /v1/sandboxes/sb1/sessions/s1/stdin":  {http.StatusNoContent, "", ""},
		"POST /v1/sandboxes/sb1/sessions/s1/signal": {http.StatusNoContent, "", ""},
		"POST /v1/sandboxes/sb1/sessions/s1/resize": {http.StatusNoContent, "", ""},
		"GET /v1/sandboxes/sb1/sessions":            {http.StatusOK, "", `{"sessions":[{"id":"s1","exit_code":0,"state":"exited"}]}`},
	})
	ctx := context.Background()
	s, err := c.CreateSession(ctx, "sb1", apiv1.CreateSessionRequest{Cmd: []string{"cat"}, Stdin: true})
	if err != nil || s.ID != "s1" || s.PID != 42 {
		t.Fatalf("session = %+v, err = %v", s, err)
	}
	if err := c.WriteStdin(ctx, "sb1", "s1", strings.NewReader("raw\x00bytes"), false); err != nil {
		t.Fatal(err)
	}
	if req := rec.last(t); string(req.body) != "raw\x00bytes" || req.rawQuery != "" {
		t.Errorf("stdin request = %q ?%s", req.body, req.rawQuery)
	}
	if err := c.WriteStdin(ctx, "sb1", "s1", nil, true); err != nil {
		t.Fatal(err)
	}
	if req := rec.last(t); len(req.body) != 0 || req.rawQuery != "close=true" {
		t.Errorf("close request = %q ?%s", req.body, req.rawQuery)
	}
	if err := c.Signal(ctx, "sb1", "s1", "SIGINT"); err != nil {
		t.Fatal(err)
	}
	if body := string(rec.last(t).body); body != `{"signal":"SIGINT"}` {
		t.Errorf("signal body = %s", body)
	}
	if err := c.Resize(ctx, "sb1", "s1", 120, 40); err != nil {
		t.Fatal(err)
	}
	if body := string(rec.last(t).body); body != `{"cols":120,"rows":40}` {
		t.Errorf("resize body = %s", body)
	}
	sessions, err := c.ListSessions(ctx, "sb1")
	if err != nil || len(sessions) != 1 || sessions[0].ExitCode == nil || *sessions[0].ExitCode != 0 {
		t.Errorf("sessions = %+v, err = %v", sessions, err)
	}
}

func TestFiles(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"GET /v1/sandboxes/sb1/files":        {http.StatusOK, "application/octet-stream", "file\ncontent"},
		"PUT /v1/sandboxes/sb1/files":        {http.StatusOK, "", `{"name":"x","path":"/tmp/x","type":"file","size":3}`},
		"GET /v1/sandboxes/dir/files":        {http.StatusOK, "application/json; charset=utf-8", `{"path":"/tmp","entries":[{"name":"x","type":"file"}]}`},
		"POST /v1/sandboxes/sb1/files/mkdir": {http.StatusCreated, "", `{"name":"d","path":"/tmp/d","type":"dir"}`},
		"POST /v1/sandboxes/sb1/files/move":  {http.StatusOK, "", `{"name":"y","path":"/tmp/y","type":"file"}`},
		"DELETE /v1/sandboxes/sb1/files":     {http.StatusNoContent, "", ""},
	})
	ctx := context.Background()

	body, err := c.ReadFile(ctx, "sb1", "/etc/a b")
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(body)
	body.Close()
	if string(content) != "file\ncontent" {
		t.Errorf("content = %q", content)
	}
	if q := rec.last(t).rawQuery; q != "path=%2Fetc%2Fa+b" {
		t.Errorf("query = %q", q)
	}
	if _, err := c.ListDir(ctx, "sb1", "/etc/a b", 0); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("ListDir on a file: err = %v", err)
	}

	if _, err := c.ReadFile(ctx, "dir", "/tmp"); !errors.Is(err, ErrIsDirectory) {
		t.Errorf("ReadFile on a directory: err = %v", err)
	}
	list, err := c.ListDir(ctx, "dir", "/tmp", 2)
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "x" {
		t.Errorf("list = %+v, err = %v", list, err)
	}
	if q := rec.last(t).rawQuery; q != "depth=2&path=%2Ftmp" {
		t.Errorf("query = %q", q)
	}

	entry, err := c.WriteFile(ctx, "sb1", "/tmp/x", strings.NewReader("abc"))
	if err != nil || entry.Size != 3 {
		t.Fatalf("entry = %+v, err = %v", entry, err)
	}
	if req := rec.last(t); string(req.body) != "abc" || req.header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("upload = %q (%s)", req.body, req.header.Get("Content-Type"))
	}
	if e, err := c.Mkdir(ctx, "sb1", "/tmp/d"); err != nil || e.Type != "dir" || string(rec.last(t).body) != `{"path":"/tmp/d"}` {
		t.Errorf("mkdir: %+v %v %s", e, err, rec.last(t).body)
	}
	if e, err := c.Move(ctx, "sb1", "/tmp/x", "/tmp/y"); err != nil || e.Path != "/tmp/y" || string(rec.last(t).body) != `{"from":"/tmp/x","to":"/tmp/y"}` {
		t.Errorf("move: %+v %v", e, err)
	}
	if err := c.RemoveFile(ctx, "sb1", "/tmp/y"); err != nil {
		t.Errorf("remove: %v", err)
	}
}

func TestLifecycleAndKeys(t *testing.T) {
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"POST /v1/sandboxes/sb1/pause":              {http.StatusAccepted, "", `{"id":"sb1","state":"pausing"}`},
		"POST /v1/sandboxes/sb1/snapshots":          {http.StatusCreated, "", `{"id":"snap1","name":"before","sandbox_id":"sb1","size_bytes":10}`},
		"GET /v1/sandboxes/sb1/snapshots":           {http.StatusOK, "", `{"snapshots":[{"name":"before"}]}`},
		"DELETE /v1/sandboxes/sb1/snapshots/before": {http.StatusNoContent, "", ""},
		"POST /v1/sandboxes/sb1/restore":            {http.StatusAccepted, "", `{"id":"sb1","state":"resuming"}`},
		"POST /v1/sandboxes/sb1/branch":             {http.StatusCreated, "", `{"sandboxes":[{"id":"sb2"},{"id":"sb3"}]}`},
		"GET /v1/sandboxes/sb1/events":              {http.StatusOK, "", `{"events":[{"type":"state","from":"running","to":"paused"}]}`},
		"POST /v1/keys":                             {http.StatusCreated, "", `{"id":"k1","name":"ci","key":"sk_secret"}`},
		"DELETE /v1/keys/k1":                        {http.StatusNoContent, "", ""},
	})
	ctx := context.Background()
	if sb, err := c.Pause(ctx, "sb1"); err != nil || sb.State != "pausing" {
		t.Errorf("pause: %+v %v", sb, err)
	}
	if snap, err := c.CreateSnapshot(ctx, "sb1", "before"); err != nil || snap.SandboxID != "sb1" || string(rec.last(t).body) != `{"name":"before"}` {
		t.Errorf("snapshot: %+v %v", snap, err)
	}
	if snaps, err := c.ListSnapshots(ctx, "sb1"); err != nil || len(snaps) != 1 {
		t.Errorf("snapshots: %+v %v", snaps, err)
	}
	if err := c.DeleteSnapshot(ctx, "sb1", "before"); err != nil {
		t.Errorf("delete snapshot: %v", err)
	}
	if _, err := c.Restore(ctx, "sb1", "before"); err != nil || string(rec.last(t).body) != `{"snapshot":"before"}` {
		t.Errorf("restore: %v %s", err, rec.last(t).body)
	}
	if branches, err := c.Branch(ctx, "sb1", 2); err != nil || len(branches) != 2 || string(rec.last(t).body) != `{"count":2}` {
		t.Errorf("branch: %+v %v", branches, err)
	}
	if events, err := c.Events(ctx, "sb1"); err != nil || len(events) != 1 || events[0].To != "paused" {
		t.Errorf("events: %+v %v", events, err)
	}
	if key, err := c.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "ci"}); err != nil || key.Key != "sk_secret" {
		t.Errorf("key: %+v %v", key, err)
	}
	if err := c.RevokeKey(ctx, "k1"); err != nil {
		t.Errorf("revoke: %v", err)
	}
	if _, err := c.Resume(ctx, "sb1"); !IsNotFound(err) {
		t.Errorf("route the server lacks: err = %v, want 404", err)
	}
}

func TestTemplateLogsResume(t *testing.T) {
	lines := []string{"FROM debian", "RUN apt-get update", "RUN echo \"quoted\"", "done"}
	var mu sync.Mutex
	var froms []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/templates/py/logs" {
			writeTestError(w, http.StatusNotFound, "no route")
			return
		}
		mu.Lock()
		froms = append(froms, r.URL.Query().Get("from"))
		conn := len(froms)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		from := 0
		if v := r.URL.Query().Get("from"); v != "" {
			from = int(v[0] - '0')
		}
		for i := from; i < len(lines); i++ {
			if conn == 1 && i == 2 {
				return // cut after two lines
			}
			data, _ := json.Marshal(lines[i])
			io.WriteString(w, "event: log\nid: "+string(rune('1'+i))+"\ndata: "+string(data)+"\n\n")
		}
		io.WriteString(w, "event: done\ndata: {\"name\":\"py\",\"state\":\"ready\"}\n\n")
	})
	c := testClient(t, handler)
	stream, err := c.TemplateLogs(context.Background(), "py", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var got []string
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Done {
			if ev.Template.State != apiv1.TemplateReady {
				t.Errorf("done template = %+v", ev.Template)
			}
			continue
		}
		if ev.Index != len(got) {
			t.Errorf("line %q has index %d, want %d", ev.Line, ev.Index, len(got))
		}
		got = append(got, ev.Line)
	}
	if strings.Join(got, "|") != strings.Join(lines, "|") {
		t.Errorf("lines = %q, want %q", got, lines)
	}
	if strings.Join(froms, ",") != "0,2" {
		t.Errorf("from per connection = %q, want 0 then 2", froms)
	}
}

func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SPACE_URL", "")
	t.Setenv("SPACE_API_KEY", "")
	t.Setenv("SPACE_DATA_DIR", dir)

	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "SPACE_API_KEY") {
		t.Errorf("no key anywhere: err = %v, want a sentence naming SPACE_API_KEY", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.apiKey != "admin-secret" || c.BaseURL() != DefaultURL {
		t.Errorf("client = %q at %q", c.apiKey, c.BaseURL())
	}
	t.Setenv("SPACE_API_KEY", "from-env")
	t.Setenv("SPACE_URL", "http://space.example:8080/")
	if c, err = FromEnv(); err != nil || c.apiKey != "from-env" || c.BaseURL() != "http://space.example:8080" {
		t.Errorf("client = %+v, err = %v", c, err)
	}
}
