package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// Benchmarks of the API against the shared in-process server, through the
// Go client: the per-operation costs behind the figures of `space bench`
// (see docs/performance.md). They run only with -bench, e.g.
//
//	go test -run XXX -bench . -benchtime 10x ./test/e2e/

// streamBytes is what BenchmarkAttachStreamThroughput moves per op.
const streamBytes = 64 << 20

// benchSandbox creates a running minimal sandbox for a benchmark and
// deletes it when the benchmark ends.
func benchSandbox(b *testing.B) *apiv1.Sandbox {
	b.Helper()
	requireBenchServer(b)
	ctx := benchContext(b)
	sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", TimeoutS: 3600})
	if err != nil {
		b.Fatalf("create sandbox: %v", err)
	}
	b.Cleanup(func() {
		if err := env.client.DeleteSandbox(context.Background(), sb.ID); err != nil && !client.IsNotFound(err) {
			b.Errorf("delete sandbox %s: %v", sb.ID, err)
		}
	})
	if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		b.Fatalf("wait for sandbox %s: %v", sb.ID, err)
	}
	return sb
}

func requireBenchServer(b *testing.B) {
	b.Helper()
	if env.skip != "" {
		b.Skip(env.skip)
	}
}

func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// BenchmarkCreateSandbox is create → running → delete of a minimal sandbox;
// ms-to-running/op is the create → running part alone. cpu-ms/op is all
// the CPU one create → delete costs the machine: this process (server and
// client), the runsc commands it ran, and the sandbox's own cgroup (read
// just before the delete): 2 cores divided by it bounds creates per second.
func BenchmarkCreateSandbox(b *testing.B) {
	requireBenchServer(b)
	ctx := benchContext(b)
	var toRunning, sandboxes time.Duration
	self0, all0 := processCPU(b), processAndChildrenCPU(b)
	defer func() {
		self, all := processCPU(b)-self0, processAndChildrenCPU(b)-all0
		perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
		b.ReportMetric(perOp(all+sandboxes), "cpu-ms/op")
		b.ReportMetric(perOp(self), "server-cpu-ms/op")
		b.ReportMetric(perOp(all-self), "runsc-cmd-cpu-ms/op")
		b.ReportMetric(perOp(sandboxes), "sandbox-cpu-ms/op")
	}()
	for b.Loop() {
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal"})
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			b.Fatalf("wait: %v", err)
		}
		toRunning += time.Since(start)
		sandboxes += sandboxCPU(b, sb.ID)
		if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatalf("delete: %v", err)
		}
	}
	b.ReportMetric(float64(toRunning.Milliseconds())/float64(b.N), "ms-to-running/op")
}

// cpuMeter reports where a benchmark's CPU time went: inside the sandbox
// (its cgroup: gVisor's sentry, the agent and the command) and in this
// process (the in-process server and the Go client). Wall time alone
// cannot tell a slow path from a starved one.
type cpuMeter struct {
	sandboxID       string
	sandbox0, host0 time.Duration
}

func startCPUMeter(b *testing.B, sandboxID string) *cpuMeter {
	b.Helper()
	return &cpuMeter{sandboxID: sandboxID, sandbox0: sandboxCPU(b, sandboxID), host0: processCPU(b)}
}

// report adds sandbox-cpu-ms/op and host-cpu-ms/op to the benchmark.
func (m *cpuMeter) report(b *testing.B) {
	b.Helper()
	n := float64(b.N)
	b.ReportMetric(float64((sandboxCPU(b, m.sandboxID)-m.sandbox0).Microseconds())/1000/n, "sandbox-cpu-ms/op")
	b.ReportMetric(float64((processCPU(b)-m.host0).Microseconds())/1000/n, "host-cpu-ms/op")
}

// sandboxCPU reads the CPU time charged to a sandbox's cgroup (v1 or v2).
func sandboxCPU(b *testing.B, id string) time.Duration {
	b.Helper()
	if v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct/space", id, "cpuacct.usage")); err == nil {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			b.Fatalf("cpuacct.usage of %s: %v", id, err)
		}
		return time.Duration(ns)
	}
	v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/space", id, "cpu.stat"))
	if err != nil {
		b.Fatalf("CPU usage of sandbox %s: %v", id, err)
	}
	for _, line := range strings.Split(string(v), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
			us, _ := strconv.ParseInt(f[1], 10, 64)
			return time.Duration(us) * time.Microsecond
		}
	}
	b.Fatalf("no usage_usec in cpu.stat of %s", id)
	return 0
}

// processAndChildrenCPU adds the CPU time of the commands this process
// ran and waited for (runsc) to processCPU.
func processAndChildrenCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return processCPU(b) + time.Duration(ru.Utime.Nano()+ru.Stime.Nano())
}

// processCPU is the user+system CPU time of this process.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExecTrue is one POST .../exec of `true` on a running sandbox.
func BenchmarkExecTrue(b *testing.B) {
	sb := benchSandbox(b)
	ctx := benchContext(b)
	cpu := startCPUMeter(b, sb.ID)
	defer cpu.report(b)
	for b.Loop() {
		res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"true"}})
		if err != nil {
			b.Fatalf("exec: %v", err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("exec true: exit %d: %s", res.ExitCode, res.Stderr)
		}
	}
}

// BenchmarkAttachStreamThroughput starts a session that writes 64 MiB to
// stdout and reads all of it through attach (SSE). The kinds of output
// differ in what the API does with them: text goes out as JSON strings,
// NUL bytes too but escaped six-fold, invalid UTF-8 as base64.
func BenchmarkAttachStreamThroughput(b *testing.B) {
	for _, kind := range []struct{ name, script string }{
		{"text", fmt.Sprintf("yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c %d", streamBytes)},
		{"zeros", fmt.Sprintf("head -c %d /dev/zero", streamBytes)},
		{"random", fmt.Sprintf("head -c %d /dev/urandom", streamBytes)},
	} {
		b.Run(kind.name, func(b *testing.B) {
			sb := benchSandbox(b)
			ctx := benchContext(b)
			b.SetBytes(streamBytes)
			cpu := startCPUMeter(b, sb.ID)
			defer cpu.report(b)
			for b.Loop() {
				got, err := streamSession(ctx, sb.ID, kind.script)
				if err != nil {
					b.Fatal(err)
				}
				if got != streamBytes {
					b.Fatalf("read %d bytes, want %d", got, streamBytes)
				}
			}
		})
	}
}

// streamSession runs script in a session and returns how many output bytes
// attach delivered before the exit event.
func streamSession(ctx context.Context, id, script string) (int64, error) {
	sess, err := env.client.CreateSession(ctx, id, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		return 0, fmt.Errorf("create session: %w", err)
	}
	stream, err := env.client.Attach(ctx, id, sess.ID, 0)
	if err != nil {
		return 0, fmt.Errorf("attach: %w", err)
	}
	defer stream.Close()
	var received int64
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			return received, errors.New("stream ended without an exit event")
		}
		if err != nil {
			return received, fmt.Errorf("attach: %w", err)
		}
		switch ev.Type {
		case apiv1.EventTruncated:
			return received, fmt.Errorf("the reader fell behind and output was dropped: %+v", *ev.Truncated)
		case apiv1.EventExit:
			if ev.ExitCode != 0 {
				return received, fmt.Errorf("session exited %d: %s", ev.ExitCode, ev.Error)
			}
			return received, nil
		default:
			received += int64(len(ev.Data))
		}
	}
}

// BenchmarkFileWriteRead1MiB is a PUT of 1 MiB to the sandbox's disk
// followed by a GET of it; an op moves the MiB in and back out.
func BenchmarkFileWriteRead1MiB(b *testing.B) {
	sb := benchSandbox(b)
	ctx := benchContext(b)
	payload := make([]byte, 1<<20)
	if _, err := rand.Read(payload); err != nil {
		b.Fatal(err)
	}
	const path = "/home/user/bench-1mib.bin"
	b.SetBytes(2 << 20)
	cpu := startCPUMeter(b, sb.ID)
	defer cpu.report(b)
	for b.Loop() {
		if _, err := env.client.WriteFile(ctx, sb.ID, path, bytes.NewReader(payload)); err != nil {
			b.Fatalf("write: %v", err)
		}
		body, err := env.client.ReadFile(ctx, sb.ID, path)
		if err != nil {
			b.Fatalf("read: %v", err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			b.Fatalf("read: %v", err)
		}
		if !bytes.Equal(got, payload) {
			b.Fatalf("read back %d bytes that differ from the %d written", len(got), len(payload))
		}
	}
}

// BenchmarkCreatePooled is a create served from a warm pool of minimal
// sandboxes (returned running) and its delete; the pool is refilled
// between operations, outside the timer.
func BenchmarkCreatePooled(b *testing.B) {
	requireBenchServer(b)
	ctx := benchContext(b)
	if _, err := env.client.SetTemplatePool(ctx, "minimal", 1); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.client.SetTemplatePool(context.Background(), "minimal", 0) })
	waitPoolFull := func() {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			tpl, err := env.client.GetTemplate(ctx, "minimal")
			if err == nil && tpl.Pool != nil && tpl.Pool.Ready >= 1 {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("pool did not fill: %+v, %v", tpl, err)
			}
		}
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		waitPoolFull()
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal"})
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		total += time.Since(start)
		if sb.State != apiv1.StateRunning {
			b.Fatalf("pooled create returned %s, want running", sb.State)
		}
		if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatalf("delete: %v", err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-running/op")
}
