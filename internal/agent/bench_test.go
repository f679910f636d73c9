package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
)

// Benchmarks of the agent alone, on the host, over the transport the node
// uses (h2c, binary protobuf): the floor under the API's exec and attach
// figures (see docs/performance.md). Run with
//
//	go test -run XXX -bench . -benchtime 20x ./internal/agent/

// benchStdoutBytes is what BenchmarkAgentStdoutThroughput moves per op.
const benchStdoutBytes = 64 << 20

// newBenchProcessClient serves an agent on a loopback port for the
// benchmark and returns a process client speaking to it like the node does.
// It needs root for the same reason as the tests (the agent switches
// users), though the benchmarks run everything as root.
func newBenchProcessClient(b *testing.B) processpbconnect.ProcessClient {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("agent benchmarks start processes as root; run as root")
	}
	a, err := New(Config{
		AccessToken:       testToken,
		DefaultUser:       "root",
		OutputBufferBytes: 1 << 20,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	transport := &http.Transport{Protocols: h2c, TLSClientConfig: &tls.Config{}}
	b.Cleanup(func() {
		transport.CloseIdleConnections()
		cancel()
		if err := <-served; err != nil {
			b.Errorf("serve: %v", err)
		}
		_ = a.Close()
	})
	opts := clientOptions{h2c: true, binary: true}
	return processpbconnect.NewProcessClient(&http.Client{Transport: transport}, "http://"+ln.Addr().String(), opts.connectOptions()...)
}

// runToEnd starts cmd and reads its stream to the end event, returning the
// stdout bytes seen.
func runToEnd(ctx context.Context, c processpbconnect.ProcessClient, cmd string, args ...string) (int64, error) {
	stream, err := c.Start(ctx, startRequest(cmd, args...))
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	var stdout int64
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if data := ev.GetData(); data != nil {
			stdout += int64(len(data.GetStdout()))
		}
		if end := ev.GetEnd(); end != nil {
			if !end.GetExited() || end.GetExitCode() != 0 {
				return stdout, fmt.Errorf("%s ended: %s", cmd, end.GetStatus())
			}
			return stdout, nil
		}
	}
	if err := stream.Err(); err != nil {
		return stdout, err
	}
	return stdout, fmt.Errorf("%s: stream ended without an end event", cmd)
}

// BenchmarkAgentExecTrue is one process.Start of /bin/true, read to its end.
func BenchmarkAgentExecTrue(b *testing.B) {
	c := newBenchProcessClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for b.Loop() {
		if _, err := runToEnd(ctx, c, "/bin/true"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAgentStdoutThroughput streams 64 MiB of a process's stdout.
func BenchmarkAgentStdoutThroughput(b *testing.B) {
	c := newBenchProcessClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.SetBytes(benchStdoutBytes)
	for b.Loop() {
		got, err := runToEnd(ctx, c, "head", "-c", fmt.Sprint(benchStdoutBytes), "/dev/zero")
		if err != nil {
			b.Fatal(err)
		}
		if got != benchStdoutBytes {
			b.Fatalf("read %d bytes of stdout, want %d", got, benchStdoutBytes)
		}
	}
}
