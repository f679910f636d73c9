package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/filesystempb/filesystempbconnect"
	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
)

const (
	testToken = "test-token-1"
	testUID   = 65534 // "tester" runs as nobody's uid, which exists on any host
)

// testEnv is an agent served on a loopback port with a private passwd
// database: root (home under the temp dir) and tester (uid 65534, member of
// the extra group 4242).
type testEnv struct {
	agent     *Agent
	baseURL   string
	dir       string // world-traversable temp dir
	rootHome  string
	userHome  string
	h1Client  *http.Client  // HTTP/1.1 without any auth header
	h2cClient *http.Client  // h2c prior knowledge, without any auth header
	stopped   chan struct{} // closed when the agent stops serving
}

func newTestEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agent tests switch users and chown; run as root")
	}
	dir := t.TempDir()
	// Let uid 65534 reach its home inside the temp dir.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := &testEnv{dir: dir, rootHome: filepath.Join(dir, "root"), userHome: filepath.Join(dir, "home", "tester")}
	mustMkdir(t, filepath.Join(dir, "etc"))
	mustMkdir(t, env.rootHome)
	mustMkdir(t, env.userHome)
	if err := os.Chown(env.userHome, testUID, testUID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "etc", "passwd"), fmt.Sprintf(
		"root:x:0:0:root:%s:/bin/sh\ntester:x:%d:%d:tester:%s:/bin/sh\n", env.rootHome, testUID, testUID, env.userHome))
	writeFile(t, filepath.Join(dir, "etc", "group"), fmt.Sprintf(
		"root:x:0:\ntesters:x:%d:\nextra:x:4242:other,tester\n", testUID))

	cfg := Config{
		AccessToken:       testToken,
		RootDir:           dir,
		DefaultUser:       "root",
		OutputBufferBytes: 1 << 20,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// An agent that handles signals is run as the binary runs it.
	run := cfg.ForwardSignals
	if run {
		cfg.Listener = ln
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	env.stopped = make(chan struct{})
	var serveErr error
	go func() {
		defer close(env.stopped)
		if run {
			serveErr = a.Run(ctx)
		} else {
			serveErr = a.Serve(ctx, ln)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-env.stopped
		if serveErr != nil {
			t.Errorf("serve: %v", serveErr)
		}
		_ = a.Close()
	})
	env.agent = a
	env.baseURL = "http://" + ln.Addr().String()
	env.h1Client = &http.Client{Transport: &http.Transport{}}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	env.h2cClient = &http.Client{Transport: &http.Transport{Protocols: h2c, TLSClientConfig: &tls.Config{}}}
	t.Cleanup(env.h1Client.CloseIdleConnections)
	t.Cleanup(env.h2cClient.CloseIdleConnections)
	return env
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// headerInterceptor adds fixed request headers (token, user) to RPCs.
type headerInterceptor struct{ header http.Header }

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		for k, v := range h.header {
			req.Header()[k] = v
		}
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		for k, v := range h.header {
			conn.RequestHeader()[k] = v
		}
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type clientOptions struct {
	h2c    bool
	binary bool
	token  string // "" means testToken; "-" means none
	user   string
}

func (o clientOptions) connectOptions() []connect.ClientOption {
	h := http.Header{}
	switch o.token {
	case "":
		h.Set(accessTokenHeader, testToken)
	case "-":
	default:
		h.Set(accessTokenHeader, o.token)
	}
	if o.user != "" {
		r := http.Request{Header: http.Header{}}
		r.SetBasicAuth(o.user, "")
		h.Set("Authorization", r.Header.Get("Authorization"))
	}
	opts := []connect.ClientOption{connect.WithInterceptors(headerInterceptor{h})}
	if !o.binary {
		opts = append(opts, connect.WithProtoJSON())
	}
	return opts
}

func (e *testEnv) httpClient(o clientOptions) *http.Client {
	if o.h2c {
		return e.h2cClient
	}
	return e.h1Client
}

func (e *testEnv) processClient(o clientOptions) processpbconnect.ProcessClient {
	return processpbconnect.NewProcessClient(e.httpClient(o), e.baseURL, o.connectOptions()...)
}

func (e *testEnv) fsClient(o clientOptions) filesystempbconnect.FilesystemClient {
	return filesystempbconnect.NewFilesystemClient(e.httpClient(o), e.baseURL, o.connectOptions()...)
}

// processEvents abstracts Start and Connect client streams.
type processEvents[T interface {
	GetEvent() *processpb.ProcessEvent
}] interface {
	Receive() bool
	Msg() T
	Err() error
}

// runResult is everything a process stream delivered.
type runResult struct {
	pid        uint32
	order      []string // event kinds in order: start, data, keepalive, end
	stdout     []byte
	stderr     []byte
	pty        []byte
	combined   []byte
	end        *processpb.ProcessEvent_EndEvent
	keepalives int
}

// collect reads a process stream to its end. It fails the test if the
// stream violates the SDKs' required event order.
func collect[T interface {
	GetEvent() *processpb.ProcessEvent
}](t *testing.T, s processEvents[T]) (runResult, error) {
	t.Helper()
	var r runResult
	err := collectInto(t, &r, s)
	return r, err
}

// collectInto continues reading a stream whose first events are in r.
func collectInto[T interface {
	GetEvent() *processpb.ProcessEvent
}](t *testing.T, r *runResult, s processEvents[T]) error {
	t.Helper()
	for r.end == nil && s.Receive() {
		recordEvent(t, r, s.Msg().GetEvent())
	}
	return s.Err()
}

// recordEvent adds ev to r; it returns false after the end event.
func recordEvent(t *testing.T, r *runResult, ev *processpb.ProcessEvent) bool {
	t.Helper()
	if len(r.order) == 0 && ev.GetStart() == nil {
		t.Fatalf("first event is %v, want start", ev)
	}
	if r.end != nil {
		t.Fatalf("event %v after end", ev)
	}
	switch e := ev.GetEvent().(type) {
	case *processpb.ProcessEvent_Start:
		r.order = append(r.order, "start")
		r.pid = e.Start.GetPid()
	case *processpb.ProcessEvent_Data:
		r.order = append(r.order, "data")
		switch out := e.Data.GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Stdout:
			r.stdout = append(r.stdout, out.Stdout...)
			r.combined = append(r.combined, out.Stdout...)
		case *processpb.ProcessEvent_DataEvent_Stderr:
			r.stderr = append(r.stderr, out.Stderr...)
			r.combined = append(r.combined, out.Stderr...)
		case *processpb.ProcessEvent_DataEvent_Pty:
			r.pty = append(r.pty, out.Pty...)
			r.combined = append(r.combined, out.Pty...)
		}
	case *processpb.ProcessEvent_Keepalive:
		r.order = append(r.order, "keepalive")
		r.keepalives++
	case *processpb.ProcessEvent_End:
		r.order = append(r.order, "end")
		r.end = e.End
	}
	return true
}

func startRequest(cmd string, args ...string) *connect.Request[processpb.StartRequest] {
	stdin := false
	return connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: cmd, Args: args},
		Stdin:   &stdin,
	})
}

// startProcess starts req and reads its start event: the stream to go on
// reading, and what it said so far (the pid).
func startProcess(ctx context.Context, t *testing.T, c processpbconnect.ProcessClient, req *connect.Request[processpb.StartRequest]) (*connect.ServerStreamForClient[processpb.StartResponse], *runResult) {
	t.Helper()
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	res := &runResult{}
	recordEvent(t, res, stream.Msg().GetEvent())
	return stream, res
}

func shell(script string) *connect.Request[processpb.StartRequest] {
	return startRequest("/bin/sh", "-c", script)
}

// run starts a process and collects its whole stream.
func run(t *testing.T, c processpbconnect.ProcessClient, req *connect.Request[processpb.StartRequest]) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := collect(t, stream)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if res.end == nil {
		t.Fatalf("stream ended without end event: %v", res.order)
	}
	return res
}

func connectCode(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
