package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// runMain runs Main with captured streams and the given stdin.
func runMain(t *testing.T, in string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	savedIn, savedOut, savedErr := stdin, stdout, stderr
	stdin, stdout, stderr = strings.NewReader(in), &o, &e
	t.Cleanup(func() { stdin, stdout, stderr = savedIn, savedOut, savedErr })
	code = Main(args)
	return code, o.String(), e.String()
}

// useServer points the CLI at handler instead of the environment's server.
func useServer(t *testing.T, handler http.Handler) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	saved := connect
	connect = func() (*client.Client, error) { return client.New(srv.URL, "k"), nil }
	t.Cleanup(func() { connect = saved })
}

func TestParseKeyValue(t *testing.T) {
	tests := []struct {
		in, key, value string
		wantErr        bool
	}{
		{in: "A=1", key: "A", value: "1"},
		{in: "A=", key: "A", value: ""},
		{in: "URL=http://x/?a=b", key: "URL", value: "http://x/?a=b"},
		{in: "A", wantErr: true},
		{in: "=1", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		key, value, err := parseKeyValue(tt.in)
		if (err != nil) != tt.wantErr || key != tt.key || value != tt.value {
			t.Errorf("parseKeyValue(%q) = %q, %q, %v", tt.in, key, value, err)
		}
	}
	kv := keyValues{}
	for _, s := range []string{"b=2", "a=1", "b=3"} {
		if err := kv.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if kv.String() != "a=1,b=3" {
		t.Errorf("repeated flag = %q, want the last value per key", kv.String())
	}
}

func TestParseCopyEndpoint(t *testing.T) {
	tests := []struct {
		in      string
		want    copyEndpoint
		wantErr string
	}{
		{in: "-", want: copyEndpoint{stdio: true}},
		{in: "sb1:/tmp/x", want: copyEndpoint{sandboxID: "sb1", path: "/tmp/x"}},
		{in: "sb1:/dir/", want: copyEndpoint{sandboxID: "sb1", path: "/dir/"}},
		{in: "sb1:/a:b", want: copyEndpoint{sandboxID: "sb1", path: "/a:b"}},
		{in: "local.txt", want: copyEndpoint{path: "local.txt"}},
		{in: "./a:b", want: copyEndpoint{path: "./a:b"}},
		{in: "/tmp/a:b", want: copyEndpoint{path: "/tmp/a:b"}},
		{in: ":/x", want: copyEndpoint{path: ":/x"}},
		{in: "sb1:", wantErr: "no path after the sandbox ID"},
		{in: "sb1:tmp/x", wantErr: "must be absolute"},
		{in: "", wantErr: "empty path"},
	}
	for _, tt := range tests {
		got, err := parseCopyEndpoint(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseCopyEndpoint(%q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseCopyEndpoint(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	fs := newFlagSet("space branch ID", "")
	count := fs.Int("count", 1, "")
	positional, err := fs.parse([]string{"sb1", "--count", "3"}, true)
	if err != nil || *count != 3 || len(positional) != 1 || positional[0] != "sb1" {
		t.Errorf("positional = %q, count = %d, err = %v", positional, *count, err)
	}
	fs = newFlagSet("x", "")
	flagValue := fs.Bool("f", false, "")
	positional, err = fs.parse([]string{"a", "--", "-f", "b"}, true)
	if err != nil || *flagValue || strings.Join(positional, " ") != "a -f b" {
		t.Errorf("after --: positional = %q, f = %v, err = %v", positional, *flagValue, err)
	}
}

func TestParseExecArgs(t *testing.T) {
	tests := []struct {
		args    []string
		id      string
		cmd     string
		tty     bool
		wantErr string
	}{
		{args: []string{"sb1", "--", "ls", "-la"}, id: "sb1", cmd: "ls -la"},
		{args: []string{"--tty", "sb1", "ls", "-la"}, id: "sb1", cmd: "ls -la", tty: true},
		{args: []string{"-t", "sb1", "--", "sh", "-c", "echo --tty"}, id: "sb1", cmd: "sh -c echo --tty", tty: true},
		{args: []string{"sb1", "--", "--"}, id: "sb1", cmd: "--"},
		{args: []string{}, wantErr: "needs a sandbox ID"},
		{args: []string{"sb1"}, wantErr: "needs a command"},
		{args: []string{"sb1", "--"}, wantErr: "needs a command"},
		{args: []string{"--nope", "sb1", "ls"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		fs := newFlagSet("space exec", "")
		tty := fs.Bool("tty", false, "")
		fs.BoolVar(tty, "t", false, "")
		id, cmd, err := parseExecArgs(fs, tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err = %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || id != tt.id || strings.Join(cmd, " ") != tt.cmd || *tty != tt.tty {
			t.Errorf("%q: id=%q cmd=%q tty=%v err=%v", tt.args, id, cmd, *tty, err)
		}
	}
}

func TestUsageErrorsAndHelp(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{args: nil, code: 2, inStderr: "space: missing command"},
		{args: []string{"frobnicate"}, code: 2, inStderr: `space: unknown command "space frobnicate"`},
		{args: []string{"help"}, code: 0, inStdout: "SPACE_API_KEY"},
		{args: []string{"-h"}, code: 0, inStdout: "Commands:"},
		{args: []string{"help", "sandbox", "create"}, code: 0, inStdout: "Usage: space sandbox create"},
		{args: []string{"sandbox", "create", "-h"}, code: 0, inStdout: "-memory-mb"},
		{args: []string{"sandbox"}, code: 2, inStderr: "Usage: space sandbox COMMAND"},
		{args: []string{"sandbox", "get"}, code: 2, inStderr: "space: sandbox get needs exactly one sandbox ID"},
		{args: []string{"sandbox", "create", "--env", "NOEQUALS"}, code: 2, inStderr: `"NOEQUALS" is not KEY=VALUE`},
		{args: []string{"sandbox", "create", "--vcpus", "many"}, code: 2, inStderr: "invalid value"},
		{args: []string{"exec", "sb1"}, code: 2, inStderr: "exec needs a command after the sandbox ID"},
		{args: []string{"cp", "a", "b"}, code: 2, inStderr: "one side of cp must be a sandbox path"},
		{args: []string{"cp", "sb1:rel", "b"}, code: 2, inStderr: "must be absolute"},
		{args: []string{"branch", "sb1", "--count", "0"}, code: 2, inStderr: "--count must be at least 1"},
		{args: []string{"template", "build"}, code: 2, inStderr: "template build needs a recipe"},
		{args: []string{"keys", "create"}, code: 2, inStderr: "keys create needs a NAME"},
		{args: []string{"snapshot", "rm", "sb1"}, code: 2, inStderr: "at least one snapshot name"},
		{args: []string{"sandbox", "rm", "--all", "sb1"}, code: 2, inStderr: "IDs or --all, not both"},
		{args: []string{"sandbox", "rm"}, code: 2, inStderr: "at least one sandbox ID (or --all)"},
		{args: []string{"template", "pool", "base"}, code: 2, inStderr: "a template name and a size"},
		{args: []string{"template", "pool", "--all", "base", "1"}, code: 2, inStderr: "a template name and a size"},
		{args: []string{"template", "pool", "base", "many"}, code: 2, inStderr: "0 or more"},
		{args: []string{"bench", "--runtime", "kvm"}, code: 2, inStderr: "--runtime: unknown runtime \"kvm\""},
		{args: []string{"node", "wait-empty", "extra"}, code: 2, inStderr: "node wait-empty"},
		{args: []string{"control-plane", "--store", "postgres://x/y", "--admin-key-file", "/nonexistent/key"}, code: 1, inStderr: "read the admin key"},
		{args: []string{"serve", "--http-idle-timeout", "0s"}, code: 2, inStderr: "--http-idle-timeout must be positive"},
		{args: []string{"serve", "--http-max-connections", "-1"}, code: 2, inStderr: "--http-max-connections 0 (unlimited) or positive"},
	}
	for _, tt := range tests {
		code, out, errOut := runMain(t, "", tt.args...)
		if code != tt.code || !strings.Contains(out, tt.inStdout) || !strings.Contains(errOut, tt.inStderr) {
			t.Errorf("space %q: code %d (want %d)\nstdout: %s\nstderr: %s", tt.args, code, tt.code, out, errOut)
		}
	}
}

func TestServerErrorsArePlainSentences(t *testing.T) {
	useServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":404,"message":"sandbox abc not found"}`)
	}))
	code, _, errOut := runMain(t, "", "sandbox", "get", "abc")
	if code != 1 || errOut != "space: sandbox abc not found\n" {
		t.Errorf("code %d, stderr %q", code, errOut)
	}

	saved := connect
	connect = func() (*client.Client, error) { return client.New("http://127.0.0.1:1", "k"), nil }
	defer func() { connect = saved }()
	code, _, errOut = runMain(t, "", "sandbox", "ls")
	if code != 1 || !strings.HasPrefix(errOut, "space: cannot reach the space server at http://127.0.0.1:1: ") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

// fakeSessionServer plays a session that echoes its stdin on stdout and
// writes to stderr, then exits with code 7.
type fakeSessionServer struct {
	mu      sync.Mutex
	created apiv1.CreateSessionRequest
	stdin   bytes.Buffer
	closed  chan struct{}
}

func (f *fakeSessionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes/sb1/sessions":
		f.mu.Lock()
		json.NewDecoder(r.Body).Decode(&f.created)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"s1","state":"running"}`)
	case r.URL.Path == "/v1/sandboxes/sb1/sessions/s1/stdin":
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.stdin.Write(body)
		f.mu.Unlock()
		if r.URL.Query().Get("close") == "true" {
			close(f.closed)
		}
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/v1/sandboxes/sb1/sessions/s1/attach":
		w.Header().Set("Content-Type", "text/event-stream")
		<-f.closed // like cat: output once stdin is done
		f.mu.Lock()
		echoed, _ := json.Marshal(apiv1.OutputChunk{Text: f.stdin.String()})
		f.mu.Unlock()
		io.WriteString(w, "event: stderr\nid: 5\ndata: {\"text\":\"warn\\n\"}\n\n")
		io.WriteString(w, "event: stdout\nid: 100\ndata: "+string(echoed)+"\n\n")
		io.WriteString(w, "event: exit\nid: 100\ndata: {\"exit_code\":7}\n\n")
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":404,"message":"no route"}`)
	}
}

func TestExecStreamsOutputAndExitCode(t *testing.T) {
	fake := &fakeSessionServer{closed: make(chan struct{})}
	useServer(t, fake)
	code, out, errOut := runMain(t, "piped input", "exec", "--env", "A=1", "--cwd", "/w", "sb1", "--", "cat", "-")
	if code != 7 {
		t.Errorf("exit code = %d, want 7 (stderr %q)", code, errOut)
	}
	if out != "piped input" || errOut != "warn\n" {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
	got := fake.created
	if strings.Join(got.Cmd, " ") != "cat -" || !got.Stdin || got.TTY || got.Env["A"] != "1" || got.Cwd != "/w" {
		t.Errorf("session request = %+v", got)
	}
}

func TestSandboxCreateSendsNetworkAndCredentialFlags(t *testing.T) {
	var got apiv1.CreateSandboxRequest
	useServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(apiv1.Sandbox{ID: "abc"})
	}))
	code, out, errOut := runMain(t, "", "sandbox", "create", "--no-internet", "--allow", "api.example.com",
		"--allow", "10.1.0.0/16", "--deny", "*.bad.example", "--private-ports",
		"--credential", "api.example.com:Authorization=Bearer ${KEY}",
		"--credential-env", "api.example.com:KEY_ENV=KEY")
	if code != 0 || out != "abc\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	n := got.Network
	if n == nil || n.AllowInternet == nil || *n.AllowInternet || n.AllowPublicTraffic == nil || *n.AllowPublicTraffic ||
		strings.Join(n.Allow, " ") != "api.example.com 10.1.0.0/16" || strings.Join(n.Deny, " ") != "*.bad.example" {
		t.Fatalf("network sent: %+v", n)
	}
	want := []apiv1.CredentialRule{
		{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${KEY}"},
		{Host: "api.example.com", Env: "KEY_ENV", Secret: "KEY"},
	}
	if len(got.Credentials) != 2 || got.Credentials[0] != want[0] || got.Credentials[1] != want[1] {
		t.Fatalf("credentials sent: %+v", got.Credentials)
	}

	code, _, errOut = runMain(t, "", "sandbox", "create", "--credential", "no-colon")
	if code != 2 || !strings.Contains(errOut, "HOST:HEADER=VALUE") {
		t.Fatalf("bad --credential: exit %d, %q", code, errOut)
	}
	for _, bad := range []string{"api.example.com:KEY_ENV=", "api.example.com:=KEY", ":KEY_ENV=KEY"} {
		code, _, errOut = runMain(t, "", "sandbox", "create", "--credential-env", bad)
		if code != 2 || !strings.Contains(errOut, "HOST:ENV=SECRET") {
			t.Fatalf("bad --credential-env %q: exit %d, %q", bad, code, errOut)
		}
	}
}
