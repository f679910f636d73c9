package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/template"
)

// The wire of testdata/chanecho, the in-sandbox end (a main package cannot
// be imported).
const (
	chanEchoSize = 64
	chanH2Port   = AgentPort + 1
	chanChunk    = 1 << 20 // the node's largest HTTP/2 frame from an agent
	chanDir      = "/run/chan"
	// chanStreamBytes is what a throughput op moves from the sandbox out.
	chanStreamBytes = 64 << 20
	// chanIdle is how long the -idle cases leave the sandbox alone before
	// each round trip.
	chanIdle = time.Second
)

// BenchmarkAgentChannel measures the agent channel's transports inside real
// gVisor sandboxes, agent side to node side: a 64-byte echo round trip and
// 64 MiB out of the sandbox, raw and under HTTP/2 (h2c, a trivial handler),
// over today's TCP path through gVisor's netstack and over a host unix
// socket the sandbox dials (runsc --host-uds=open, issue 35). tcp/connect
// is the real agent's Process.List over today's path, as the node calls it:
// its excess over tcp/h2/echo is Connect and the agent. host-uds is the
// in-sandbox program run on the host instead, over unix sockets: what is
// left without gVisor. Run as root:
//
//	go test -run XXX -bench 'AgentChannel/.*/.*/(echo|list)$' -benchtime 2000x ./internal/runtime/gvisor/
//	go test -run XXX -bench 'AgentChannel/.*/.*/.*-idle$' -benchtime 20x ./internal/runtime/gvisor/
//	go test -run XXX -bench 'AgentChannel/.*/.*/64MiB' -benchtime 10x ./internal/runtime/gvisor/
func BenchmarkAgentChannel(b *testing.B) {
	root, runsc := requireRunsc(b)
	// --host-uds=open lets a process in the sandbox connect to a socket
	// file on any gofer mount (the root filesystem and every volume too):
	// the server never sets it, and a runtime with it must let no socket
	// file but its own channel's be reachable through any mount (issue 35).
	// A later flag wins, so ExtraFlags overrides the runtime's own
	// --host-uds=none.
	rt, slots := newBenchRuntime(b, runsc, "--host-uds=open")
	echo := buildStatic(b, root, "./internal/runtime/gvisor/testdata/chanecho", "chanecho")
	agent := buildStatic(b, root, "./cmd/space-agent", "space-agent")

	// The unix socket directory is mounted like the planned channel's: a
	// host directory holding only the sockets, at a fixed path.
	sockets := b.TempDir()
	rawLn := listenUnix(b, filepath.Join(sockets, "raw.sock"))
	h2Ln := listenUnix(b, filepath.Join(sockets, "h2.sock"))
	// The same program on the host, over unix sockets: the floor without
	// gVisor (Go, the kernel's sockets, HTTP/2).
	hostSockets := b.TempDir()
	hostRawLn := listenUnix(b, filepath.Join(hostSockets, "raw.sock"))
	hostH2Ln := listenUnix(b, filepath.Join(hostSockets, "h2.sock"))
	onHost := exec.Command(echo)
	onHost.Env = []string{"CHANECHO_DIR=" + hostSockets, "CHANECHO_NO_TCP=1"}
	if err := onHost.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = onHost.Process.Kill(); _ = onHost.Wait() })

	echoID := startBenchSandbox(b, rt, slots, echo, []string{"CHANECHO_DIR=" + chanDir},
		runtime.Mount{Source: sockets, Destination: chanDir})
	agentID := startBenchSandbox(b, rt, slots, agent, []string{"SPACE_AGENT_TOKEN=" + benchToken})

	dialTCP := func(id string, port int) func() (net.Conn, error) {
		return func() (net.Conn, error) {
			return slots.Slot(id).DialContext(context.Background(), "tcp", net.JoinHostPort(network.SandboxAddr, strconv.Itoa(port)))
		}
	}
	accept := func(ln net.Listener) func() (net.Conn, error) { return ln.Accept }
	// Every connection is made before any case runs: the sandbox's HTTP/2
	// server gives up a dialed connection whose preface does not come
	// within 10 s.
	type path struct {
		name string
		raw  net.Conn
		h2   *http.Client
	}
	paths := []path{
		{"tcp", connectWithin(b, dialTCP(echoID, AgentPort)), newH2Client(b, connectWithin(b, dialTCP(echoID, chanH2Port)))},
		{"uds", connectWithin(b, accept(rawLn)), newH2Client(b, connectWithin(b, accept(h2Ln)))},
		{"host-uds", connectWithin(b, accept(hostRawLn)), newH2Client(b, connectWithin(b, accept(hostH2Ln)))},
	}
	agentConn := newH2Client(b, connectWithin(b, dialTCP(agentID, AgentPort)))
	// The -idle cases wait, untimed, before each round trip, as a pooled
	// sandbox idles before its claim: a sandbox that slept wakes slower.
	for _, idle := range []struct {
		suffix string
		wait   time.Duration
	}{{"", 0}, {"-idle", chanIdle}} {
		for _, p := range paths {
			b.Run(p.name+"/raw/echo"+idle.suffix, func(b *testing.B) { benchRawEcho(b, p.raw, idle.wait) })
			b.Run(p.name+"/h2/echo"+idle.suffix, func(b *testing.B) { benchH2Echo(b, p.h2, idle.wait) })
		}
		b.Run("tcp/connect/list"+idle.suffix, func(b *testing.B) { benchConnectList(b, agentConn, idle.wait) })
	}
	for _, p := range paths {
		b.Run(p.name+"/raw/64MiB", func(b *testing.B) { benchRawStream(b, p.raw) })
		b.Run(p.name+"/h2/64MiB", func(b *testing.B) { benchH2Stream(b, p.h2) })
	}
}

const benchToken = "bench-token"

// requireRunsc skips unless the test can start runsc sandboxes, and returns
// the repository's root and the runsc binary.
func requireRunsc(tb testing.TB) (root, runsc string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("runsc sandboxes need root (namespaces, cgroups, mounts)")
	}
	root = repoRoot(tb)
	runsc = os.Getenv("SPACE_RUNSC")
	if runsc == "" {
		runsc = filepath.Join(root, ".tools", "bin", "runsc")
	}
	if _, err := os.Stat(runsc); err != nil {
		tb.Skipf("no runsc (scripts/install-deps.sh installs it): %v", err)
	}
	return root, runsc
}

func newBenchRuntime(b *testing.B, runsc string, flags ...string) (*Runtime, *network.Namespaces) {
	state := b.TempDir()
	b.Cleanup(func() { storage.UnmountUnder(state) })
	slots, err := network.OpenNamespaces(filepath.Join(state, "netns"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = slots.Close() })
	rt, err := New(Config{RunscPath: runsc, StateDir: state, Namespaces: slots, ExtraFlags: flags})
	if err != nil {
		b.Fatal(err)
	}
	return rt, slots
}

// startBenchSandbox starts program as the first process of a sandbox on a
// minimal root filesystem, with one vCPU as the server gives by default.
func startBenchSandbox(b *testing.B, rt *Runtime, slots *network.Namespaces, program string, env []string, mounts ...runtime.Mount) string {
	rootfs := b.TempDir()
	if err := template.WriteMinimalRootfs(context.Background(), rootfs); err != nil {
		b.Fatal(err)
	}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(rootfs, m.Destination), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	id := sandboxid.New()
	slot, err := slots.Create(id)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = slot.Destroy() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = rt.Start(ctx, runtime.Spec{
		ID: id, Rootfs: runtime.Rootfs{Kind: runtime.RootfsDir, Path: rootfs}, Network: slot, Agent: program,
		Env: env, Mounts: mounts, Hostname: id, Limits: runtime.Limits{VCPUs: 1, MemoryMB: 256, Pids: 512},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	return id
}

func listenUnix(b *testing.B, path string) net.Listener {
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return ln
}

// connectWithin retries connect while the sandbox comes up (a dial into the
// netstack fails until the program listens; an accept waits for its dial).
func connectWithin(b *testing.B, connect func() (net.Conn, error)) net.Conn {
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := make(chan struct{})
		var conn net.Conn
		var err error
		go func() { conn, err = connect(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			b.Fatal("the sandbox's end of the channel never connected")
		}
		if err == nil {
			b.Cleanup(func() { conn.Close() })
			return conn
		}
		if time.Now().After(deadline) {
			b.Fatalf("connect to the sandbox: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newH2Client speaks HTTP/2 over conn with the node's settings
// (internal/node's AgentConn), whichever side dialed.
func newH2Client(b *testing.B, conn net.Conn) *http.Client {
	cc, err := (&http2.Transport{AllowHTTP: true, MaxReadFrameSize: chanChunk}).NewClientConn(conn)
	if err != nil {
		b.Fatal(err)
	}
	return &http.Client{Transport: cc}
}

func benchRawEcho(b *testing.B, conn net.Conn, idle time.Duration) {
	msg := make([]byte, 1+chanEchoSize)
	msg[0] = 'e'
	_, _ = rand.Read(msg[1:])
	got := make([]byte, chanEchoSize)
	benchRoundTrips(b, idle, func() error {
		if _, err := conn.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, got); err != nil {
			return err
		}
		if !bytes.Equal(got, msg[1:]) {
			return errors.New("the echo differs from the message")
		}
		return nil
	})
}

// benchRoundTrips times each call of roundTrip, each after idle (untimed),
// and reports the median and the 99th percentile besides the mean: on a
// loaded machine the mean is pulled by a few slow samples.
func benchRoundTrips(b *testing.B, idle time.Duration, roundTrip func() error) {
	var took []time.Duration
	for b.Loop() {
		if idle > 0 {
			b.StopTimer()
			time.Sleep(idle)
			b.StartTimer()
		}
		start := time.Now()
		if err := roundTrip(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

func benchRawStream(b *testing.B, conn net.Conn) {
	b.SetBytes(chanStreamBytes)
	req := make([]byte, 9)
	req[0] = 's'
	binary.BigEndian.PutUint64(req[1:], chanStreamBytes)
	buf := make([]byte, chanChunk)
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := drain(conn, buf, chanStreamBytes); err != nil {
			b.Fatal(err)
		}
	}
}

func benchH2Echo(b *testing.B, c *http.Client, idle time.Duration) {
	msg := make([]byte, chanEchoSize)
	_, _ = rand.Read(msg)
	benchRoundTrips(b, idle, func() error {
		resp, err := c.Post("http://agent/echo", "application/octet-stream", bytes.NewReader(msg))
		if err != nil {
			return err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, msg) {
			return fmt.Errorf("echo: %v (%d bytes back)", err, len(got))
		}
		return nil
	})
}

func benchH2Stream(b *testing.B, c *http.Client) {
	b.SetBytes(chanStreamBytes)
	buf := make([]byte, chanChunk)
	for b.Loop() {
		resp, err := c.Get(fmt.Sprintf("http://agent/stream?n=%d", chanStreamBytes))
		if err != nil {
			b.Fatal(err)
		}
		err = drain(resp.Body, buf, chanStreamBytes)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchConnectList(b *testing.B, c *http.Client, idle time.Duration) {
	// As the node's AgentConn: binary protobuf, no gzip, the token header.
	process := processpbconnect.NewProcessClient(c, "http://agent", connect.WithAcceptCompression("gzip", nil, nil))
	list := func() error {
		req := connect.NewRequest(&processpb.ListRequest{})
		req.Header().Set("X-Access-Token", benchToken)
		_, err := process.List(context.Background(), req)
		return err
	}
	if err := list(); err != nil {
		b.Fatalf("the agent's Process.List: %v", err)
	}
	benchRoundTrips(b, idle, list)
}

// drain reads exactly n bytes from r in reads of up to len(buf).
func drain(r io.Reader, buf []byte, n int64) error {
	for n > 0 {
		got, err := r.Read(buf[:min(n, int64(len(buf)))])
		n -= int64(got)
		if err != nil && n > 0 {
			return fmt.Errorf("%d bytes short: %w", n, err)
		}
	}
	return nil
}
