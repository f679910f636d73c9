package noderpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

func TestClusterToken(t *testing.T) {
	url := serve(t, nodeapitest.NewFake("fake"), ServerOptions{})
	ctx := context.Background()
	c, err := Dial(url, "wrong-token", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Info(ctx)
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong token: got %v, want unauthenticated", err)
	}
	if !strings.Contains(err.Error(), "cluster token") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("wrong token: %q should name the cluster token and not echo it", err)
	}
	// The plain routes are guarded too.
	for _, path := range []string{"/agent/abc/files", "/port/abc/80", "/space.node.v1.NodeService/Info"} {
		for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x"} {
			req, _ := http.NewRequest(http.MethodPost, url+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := (&http.Client{Transport: mustTransport(t, url)}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte("cluster token")) {
				t.Fatalf("%s with %q: %d %s", path, auth, resp.StatusCode, body)
			}
		}
	}
	if _, err := Dial(url, "", DialOptions{}); err == nil {
		t.Fatal("dial with an empty token succeeded")
	}
	// A handler without a token refuses everyone, even an empty bearer.
	srvURL := serveWithToken(t, "")
	req, _ := http.NewRequest(http.MethodPost, srvURL+"/space.node.v1.NodeService/Info", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := (&http.Client{Transport: mustTransport(t, srvURL)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("empty server token: %d", resp.StatusCode)
	}
}

func serveWithToken(t *testing.T, token string) string {
	srv, err := NewServer(NewHandler(nodeapitest.NewFake("fake"), token, nil), ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = Serve(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// mustTransport is the h2c transport a Client uses, without the token.
func mustTransport(t *testing.T, url string) http.RoundTripper {
	c, err := Dial(url, "unused", DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.http.Transport.(bearer).next
}

// errNode answers Halt with the error it is given.
type errNode struct {
	nodeapi.Node
	err error
}

func (n *errNode) Halt(ctx context.Context, id string) error { return n.err }

func TestErrorsCross(t *testing.T) {
	n := &errNode{Node: nodeapitest.NewFake("fake")}
	c := dial(t, n)
	ctx := context.Background()
	for _, sentinel := range []error{nodeapi.ErrNoSandbox, nodeapi.ErrNoSession, nodeapi.ErrExecTimeout, nodeapi.ErrNoEgress, nodeapi.ErrInvalidName, nodeapi.ErrNoRuntime, nodeapi.ErrNoCheckpoint, nodeapi.ErrTooManySessions, nodeapi.ErrSessionSpec} {
		n.err = fmt.Errorf("halt abc: %w", sentinel)
		err := c.Halt(ctx, "abc")
		if !errors.Is(err, sentinel) || err.Error() != n.err.Error() {
			t.Errorf("%v crossed as %q (is: %v)", n.err, err, errors.Is(err, sentinel))
		}
	}
	// An agent error keeps its status, bare or wrapped.
	ae := &nodeapi.AgentError{Status: http.StatusInsufficientStorage, Message: "no space left on device"}
	for _, sent := range []error{ae, fmt.Errorf("write /x: %w", ae)} {
		n.err = sent
		err := c.Halt(ctx, "abc")
		var got *nodeapi.AgentError
		if !errors.As(err, &got) || *got != *ae || err.Error() != sent.Error() {
			t.Errorf("%v crossed as %q (%#v)", sent, err, got)
		}
	}
	// Any other error keeps its message and is none of the sentinels.
	n.err = errors.New("runsc exploded")
	err := c.Halt(ctx, "abc")
	if err.Error() != "runsc exploded" || errors.Is(err, nodeapi.ErrNoSandbox) || errors.As(err, new(*nodeapi.AgentError)) {
		t.Errorf("plain error crossed as %q", err)
	}
	// A node that cannot be reached is named.
	dead, _ := Dial("http://127.0.0.1:1", testToken, DialOptions{})
	if _, err := dead.Info(ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable node: %v", err)
	}
}

// streamNode's sandbox streams files it never holds: WriteFile hashes what
// it reads, ReadFile generates its content.
type streamNode struct {
	nodeapi.Node
	size int64
	got  chan [32]byte
	gotN atomic.Int64
}

func (n *streamNode) Sandbox(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return &streamSandbox{n: n}, nil
}

type streamSandbox struct {
	nodeapi.Sandbox
	n *streamNode
}

func (s *streamSandbox) ID() string { return "stream" }

func (s *streamSandbox) WriteFile(ctx context.Context, path, user string, body io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(h, body)
	s.n.gotN.Store(n)
	if err != nil {
		return err
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	s.n.got <- sum
	return nil
}

func (s *streamSandbox) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	return io.NopCloser(io.LimitReader(pattern{}, s.n.size)), s.n.size, nil
}

// pattern is an endless deterministic byte stream.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i * 7)
	}
	return len(p), nil
}

// heapPeak samples the heap until stop is called and returns its peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms goruntime.MemStats
		for {
			goruntime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// Files larger than 64 MiB cross both ways while the process holds a
// small part of them at a time.
func TestLargeFilesStream(t *testing.T) {
	const size = 65 << 20
	n := &streamNode{Node: nodeapitest.NewFake("fake"), size: size, got: make(chan [32]byte, 1)}
	c := dial(t, n)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, "stream")
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	_, _ = io.Copy(want, io.LimitReader(pattern{}, size))

	goruntime.GC()
	var base goruntime.MemStats
	goruntime.ReadMemStats(&base)
	stop := heapPeak()
	if err := sb.WriteFile(ctx, "/big", "", io.LimitReader(pattern{}, size)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if sum := <-n.got; !bytes.Equal(sum[:], want.Sum(nil)) {
		t.Fatalf("the node read other bytes (%d of them)", n.gotN.Load())
	}
	body, gotSize, err := sb.ReadFile(ctx, "/big", "")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	h := sha256.New()
	read, err := io.Copy(h, body)
	_ = body.Close()
	if err != nil || read != size || gotSize != size || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatalf("read %d of %d bytes (announced %d): %v", read, size, gotSize, err)
	}
	peak := stop()
	if grown := int64(peak) - int64(base.HeapInuse); grown > 32<<20 {
		t.Fatalf("the heap grew by %d MiB moving %d MiB files: they were buffered", grown>>20, size>>20)
	}
}

// fakeSandbox creates a sandbox through c, a client of a fake node.
func fakeSandbox(t *testing.T, c *Client) (string, nodeapi.Sandbox) {
	t.Helper()
	ctx := context.Background()
	id := sandboxid.New()
	if err := c.Create(ctx, nodeapi.CreateRequest{Spec: nodeapi.CreateSpec{ID: id, Template: nodeapi.TemplateSpec{ID: "minimal"}}}); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return id, sb
}

// A body that fails aborts the upload: the node is not left a truncated
// file.
func TestWriteFileBodyError(t *testing.T) {
	f := nodeapitest.NewFake("fake")
	ctx := context.Background()
	id, sb := fakeSandbox(t, dial(t, f))
	broken := io.MultiReader(strings.NewReader(strings.Repeat("x", 200<<10)), failingReader{})
	if err := sb.WriteFile(ctx, "/tmp/partial", "", broken); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("write with a failing body: %v", err)
	}
	local, _ := f.Sandbox(ctx, id)
	if _, err := local.Stat(ctx, "/tmp/partial", ""); err == nil {
		t.Fatal("a failed upload left a file")
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestAttachDropped(t *testing.T) {
	f := nodeapitest.NewFake("fake")
	f.JournalLimit = 8
	ctx := context.Background()
	_, sb := fakeSandbox(t, dial(t, f))
	info, err := sb.StartSession(ctx, nodeapi.SessionSpec{Cmd: []string{"sh", "-c", "echo aaaaaaa; echo bbbbbbb; echo ccc"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, _ := sb.Session(ctx, info.ID)
		if s.End != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var req, first int64 = -1, -1
	var out bytes.Buffer
	end, err := sb.Attach(ctx, info.ID, 0, func(r, f int64) error { req, first = r, f; return nil }, func(c nodeapi.Chunk) error {
		out.Write(c.Data)
		return nil
	})
	if err != nil || end == nil || req != 0 || first != 16 || out.String() != "ccc\n" {
		t.Fatalf("attach over a drop: end %v err %v dropped(%d, %d) output %q", end, err, req, first, out.String())
	}
	refuse := errors.New("output was lost")
	if _, err := sb.Attach(ctx, info.ID, 0, func(int64, int64) error { return refuse }, func(nodeapi.Chunk) error { return nil }); !errors.Is(err, refuse) {
		t.Fatalf("attach whose dropped refuses: %v", err)
	}
	// An error from fn ends the attach with it.
	if _, err := sb.Attach(ctx, info.ID, 16, nil, func(nodeapi.Chunk) error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("attach whose fn fails: %v", err)
	}
}

// agentNode's sandboxes answer agent requests with what they received.
type agentNode struct {
	nodeapi.Node
	fail error
}

func (n *agentNode) Sandbox(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	if id != "known" {
		return nil, fmt.Errorf("sandbox %s: %w", id, nodeapi.ErrNoSandbox)
	}
	return &agentSandbox{n: n}, nil
}

type agentSandbox struct {
	nodeapi.Sandbox
	n *agentNode
}

func (s *agentSandbox) Agent() http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if s.n.fail != nil {
			return nil, s.n.fail
		}
		body, _ := io.ReadAll(req.Body)
		pr, pw := io.Pipe()
		go func() {
			// Streamed: the first line comes before the rest is ready.
			fmt.Fprintf(pw, "%s %s %s auth=%q cluster=%q host=%q body=%q\n", req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Get("Authorization"), req.Header.Get(forwardedAuthHeader), req.URL.Host, body)
			time.Sleep(50 * time.Millisecond)
			fmt.Fprint(pw, "done\n")
			pw.Close()
		}()
		return &http.Response{StatusCode: http.StatusTeapot, Header: http.Header{"X-Agent": {"yes"}}, Body: pr, Request: req}, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAgentRoute(t *testing.T) {
	n := &agentNode{Node: nodeapitest.NewFake("fake")}
	c := dial(t, n)
	ctx := context.Background()
	sb := &remoteSandbox{c: c, id: "known"}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://whatever.example/files//a%2Fb?path=/tmp/x&username=user", strings.NewReader("payload"))
	req.Header.Set("Authorization", "Basic dXNlcjo=")
	resp, err := sb.Agent().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Agent") != "yes" {
		t.Fatalf("agent answer: %d %v", resp.StatusCode, resp.Header)
	}
	line := make([]byte, 0, 256)
	buf := make([]byte, 1)
	for len(line) == 0 || line[len(line)-1] != '\n' {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		line = append(line, buf[0])
	}
	want := `POST /files//a%2Fb path=/tmp/x&username=user auth="Basic dXNlcjo=" cluster="" host="agent" body="payload"` + "\n"
	if string(line) != want {
		t.Fatalf("the agent received\n%s\nwant\n%s", line, want)
	}
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "done\n" {
		t.Fatalf("rest of the stream: %q", rest)
	}

	// The node's own failures come back as errors, not as answers.
	n.fail = errors.New("agent unreachable")
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox/health", nil)
	if _, err := sb.Agent().RoundTrip(req); err == nil || err.Error() != "agent unreachable" {
		t.Fatalf("failing agent: %v", err)
	}
	gone := &remoteSandbox{c: c, id: "gone"}
	if _, err := gone.Agent().RoundTrip(req); !errors.Is(err, nodeapi.ErrNoSandbox) {
		t.Fatalf("agent of a missing sandbox: %v", err)
	}
	if _, err := gone.DialPort(ctx, 80); !errors.Is(err, nodeapi.ErrNoSandbox) {
		t.Fatalf("port of a missing sandbox: %v", err)
	}
}

// Every field of the wire's Go values survives the round trip.
func TestConversionsRoundTrip(t *testing.T) {
	policy := network.Policy{
		Offline: true, AllowInternet: true,
		Allow:        []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.7/32")},
		Deny:         []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")},
		Limits:       network.Limits{BandwidthMbit: 100, MaxConnections: 50},
		AllowDomains: []string{"example.com"}, DenyDomains: []string{"*.bad.example"},
		InspectHTTP: true, Hold: true,
	}
	limits := runtime.Limits{VCPUs: 2, MemoryMB: 512, Pids: 100}
	tmpl := nodeapi.TemplateSpec{ID: "t", RootfsVolume: "templates/t", Env: map[string]string{"A": "1"}, User: "u", Workdir: "/w", Start: "start", Ready: "ready", MCPGateway: "/usr/local/bin/mcp-gateway", Runtimes: []string{"microvm", "gvisor"}}
	mounts := []nodeapi.VolumeMount{{Volume: "persistent/vol-a", Path: "/mnt/a"}, {Volume: "persistent/vol-b", Path: "/b", ReadOnly: true}}
	spec := nodeapi.CreateSpec{ID: "id", Template: tmpl, Limits: limits, DiskMB: 10, Env: map[string]string{"B": "2"}, AccessToken: "tok", Network: policy, Mounts: mounts, Runtime: "microvm"}
	id := nodeapi.Identity{AccessToken: "new", Env: map[string]string{"C": "3"}, Info: map[string]string{"sandbox_id": "x"}}
	now := time.Now().Round(0)

	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", name, got, want)
		}
		// Every field must be set in want, or a forgotten one passes.
		v := reflect.ValueOf(want)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Field(i).IsZero() {
				t.Errorf("%s: test value leaves %s zero", name, v.Type().Field(i).Name)
			}
		}
	}
	gotPolicy, err := fromPolicy(toPolicy(policy))
	if err != nil {
		t.Fatal(err)
	}
	check("policy", gotPolicy, policy)
	sample := nodeapi.MetricSample{Time: now.UTC(), CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1, MemTotal: 2, MemCache: 1, DiskUsed: 3, DiskTotal: 4}
	check("metric sample", fromMetricSample(toMetricSample(sample)), sample)
	gotSpec, err := fromCreateSpec(toCreateSpec(spec))
	if err != nil {
		t.Fatal(err)
	}
	check("create spec", gotSpec, spec)
	check("template", fromTemplate(toTemplate(tmpl)), tmpl)
	check("identity", fromIdentity(toIdentity(id)), id)
	restore := nodeapi.RestoreSpec{ID: "id", Image: "img", FromVolume: "vol", Limits: limits, DiskMB: 5, AccessToken: "tok", NewIdentity: &id, Network: policy, Rollback: true, Mounts: mounts, Runtime: "microvm"}
	gotRestore, err := fromRestoreSpec(toRestoreSpec(restore))
	if err != nil {
		t.Fatal(err)
	}
	check("restore spec", gotRestore, restore)
	mode, uid := uint32(0o750), uint32(1000)
	edit := nodeapi.VolumeEdit{Volume: "persistent/v", Path: "/p", Op: nodeapi.VolumeMkdir, Parents: true, UID: &uid, GID: &uid, Mode: &mode}
	check("volume edit", fromVolumeEdit(toVolumeEdit(edit)), edit)
	pl := nodeapi.PoolLimits{Limits: limits, DiskMB: 3}
	check("pool limits", fromPoolLimits(toPoolLimits(pl)), pl)
	info := nodeapi.Info{ID: "n", VCPUs: 1, MemoryMB: 2, DiskMB: 3, Sandboxes: 4, DiskFreeMB: 5, MemoryFreeMB: 6, VCPUsCommitted: 7, MemoryCommittedMB: 8, Templates: []string{"t", "u"}, TemplateImages: []string{"t"}, Pools: map[string]nodeapi.PoolStatus{"t": {Size: 2, Ready: 1}}, Runtimes: map[string]string{"gvisor": "gvisor", "microvm": "microvm-tcg"}}
	check("info", fromInfo(toInfo(info)), info)
	ev := nodeapi.Event{Type: nodeapi.EventPool, Time: now, Sandbox: "s", Reason: "r", TemplateID: "t", Pool: &nodeapi.PoolStatus{Size: 1, Ready: 1}}
	gotEv := fromEvent(toEvent(ev))
	if !gotEv.Time.Equal(now) {
		t.Errorf("event time %v, want %v", gotEv.Time, now)
	}
	gotEv.Time = ev.Time
	check("event", gotEv, ev)
	sspec := nodeapi.SessionSpec{Cmd: []string{"c"}, Env: map[string]string{"D": "4"}, Cwd: "/c", User: "u", TTY: true, Cols: 80, Rows: 24, Stdin: true, Tag: "tag"}
	check("session spec", fromSessionSpec(toSessionSpec(sspec)), sspec)
	si := nodeapi.SessionInfo{ID: "s", PID: 7, Spec: sspec, StartedAt: now, EndedAt: now.Add(time.Second), End: &nodeapi.End{ExitCode: 3, Error: "e"}, OutputBytes: 9, DroppedBytes: 2}
	gotSI := fromSessionInfo(toSessionInfo(si))
	if !gotSI.StartedAt.Equal(si.StartedAt) || !gotSI.EndedAt.Equal(si.EndedAt) {
		t.Errorf("session times %v %v", gotSI.StartedAt, gotSI.EndedAt)
	}
	gotSI.StartedAt, gotSI.EndedAt = si.StartedAt, si.EndedAt
	check("session info", gotSI, si)
	if _, err := fromPolicy(toPolicy(network.Policy{})); err != nil {
		t.Fatal(err)
	}
	bad := toPolicy(policy)
	bad.Allow = []string{"not-a-cidr"}
	if _, err := fromPolicy(bad); err == nil {
		t.Error("a bad prefix was accepted")
	}
}

// portNode's sandboxes hand the far end of every DialPort to the test.
type portNode struct {
	nodeapi.Node
	far chan net.Conn
}

func (n *portNode) Sandbox(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return &portSandbox{n: n}, nil
}

type portSandbox struct {
	nodeapi.Sandbox
	n *portNode
}

func (s *portSandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port != 8080 {
		return nil, fmt.Errorf("dial port %d: connection refused", port)
	}
	near, far := net.Pipe()
	s.n.far <- far
	return near, nil
}

func TestPortTunnel(t *testing.T) {
	n := &portNode{Node: nodeapitest.NewFake("fake"), far: make(chan net.Conn, 1)}
	sb := &remoteSandbox{c: dial(t, n), id: "any"}
	if _, err := sb.DialPort(context.Background(), 9); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("dial a closed port: %v", err)
	}
	exchange := func(a, b net.Conn, msg string) {
		t.Helper()
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = a.Write([]byte(msg)) }()
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(b, buf); err != nil || string(buf) != msg {
			t.Fatalf("sent %q, received %q (%v)", msg, buf, err)
		}
	}

	// The dial's context bounds the dial only.
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := sb.DialPort(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	far := <-n.far
	exchange(conn, far, "to the sandbox")
	exchange(far, conn, "from the sandbox")
	// The sandbox's side closing ends the client's reads.
	_ = far.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the sandbox closed: %v, want EOF", err)
	}
	_ = conn.Close()

	// The client closing ends the sandbox's side.
	conn, err = sb.DialPort(context.Background(), 8080)
	if err != nil {
		t.Fatal(err)
	}
	far = <-n.far
	_ = conn.Close()
	_ = far.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := far.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the client closed: %v, want the connection closed", err)
	}
}
