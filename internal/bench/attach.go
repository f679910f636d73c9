package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

const (
	// attachRuns is how many times attach_stream streams the output and
	// its floor pipes it: each run moves AttachMiB, so not --n times.
	attachRuns = 3
	// attachLine is what the session prints, 64 bytes a line: printable
	// text, as a build log or a test run prints. Zeros would measure
	// something else: attach sends valid UTF-8 as JSON text, where each
	// NUL becomes the six bytes \u0000.
	attachLine = "space-bench attach stream: printable text, 64 bytes a line ...."
	// attachSource holds 1 MiB of attachLine in the sandbox's memory. The
	// session cats it once per MiB: busybox yes | head -c makes only some
	// 37 MB/s under gVisor (a few KiB per write), so the figure and its
	// floor would both be yes's; cat of a tmpfs file makes ~700 MB/s.
	attachSource = "/dev/shm/space-bench-attach-1mib"
)

// attachPrepare writes attachSource.
var attachPrepare = fmt.Sprintf("yes '%s' | head -c %d > %s", attachLine, 1<<20, attachSource)

// attachCommand prints mib MiB of attachLine lines.
func attachCommand(mib int) string {
	return "cat" + strings.Repeat(" "+attachSource, mib)
}

// measureAttachStream starts a session that prints AttachMiB and reads it
// through attach, attachRuns times, then pipes the same command into dd
// inside the sandbox (the floor: the bytes made and moved through a pipe
// without the agent, the node, SSE and the client).
func (r *runner) measureAttachStream(ctx context.Context) error {
	mib := r.cfg.AttachMiB
	return r.withSandbox(ctx, func(id string) error {
		res, err := r.api.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"sh", "-c", attachPrepare}, TimeoutS: 60})
		if err != nil {
			return fmt.Errorf("write %s in %s: %w", attachSource, id, err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("write %s in %s: exit %d: %s", attachSource, id, res.ExitCode, res.Stderr)
		}
		a := &AttachStream{MiB: mib, Runs: attachRuns}
		if r.wants(KeyAttachStream) {
			rates := make([]float64, 0, attachRuns)
			for i := range attachRuns {
				got, dropped, d, err := r.attachOnce(ctx, id, mib)
				if err != nil {
					return fmt.Errorf("run %d of %d: %w", i+1, attachRuns, err)
				}
				rate := mbPerS(got, d)
				r.progress.printf("%s %d/%d: %.1f MB received in %s = %.1f MB/s, %d bytes dropped",
					KeyAttachStream, i+1, attachRuns, float64(got)/1e6, d.Round(time.Millisecond), rate, dropped)
				rates = append(rates, rate)
				a.DroppedBytes += dropped
			}
			a.MBPerS = median(rates)
			r.res.AttachStream = a
			note := fmt.Sprintf("a session running cat of %s (1 MiB of 64-byte text lines, in tmpfs) %d times, read through attach by this client from the session's create to its exit event; the median of %d runs, MB = 10^6 bytes", attachSource, mib, attachRuns)
			if a.DroppedBytes > 0 {
				note += fmt.Sprintf("; the server dropped %d bytes (truncated events: the client fell more than the node's session journal behind)", a.DroppedBytes)
			}
			r.res.note(KeyAttachStream, note)
		}
		if !r.wants(KeyFloorAttachStream) {
			return nil
		}
		floor, err := r.attachFloor(ctx, id, mib)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.record([]string{KeyFloorAttachStream}, err)
			return nil
		}
		if r.res.AttachStream == nil {
			r.res.AttachStream = a // the floor alone
		}
		r.res.AttachStream.FloorMBPerS = &floor
		return nil
	})
}

// attachOnce streams one session's output and returns the bytes received
// and dropped and how long from create to exit.
func (r *runner) attachOnce(ctx context.Context, id string, mib int) (got, dropped int64, d time.Duration, err error) {
	total := int64(mib) << 20
	start := time.Now()
	sess, err := r.api.CreateSession(ctx, id, apiv1.CreateSessionRequest{Cmd: []string{"sh", "-c", attachCommand(mib)}})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("create session in %s: %w", id, err)
	}
	stream, err := r.api.Attach(ctx, id, sess.ID, 0)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("attach to session %s in %s: %w", sess.ID, id, err)
	}
	defer stream.Close()
	var stderr strings.Builder
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			return 0, 0, 0, fmt.Errorf("session %s in %s: the stream ended without an exit event", sess.ID, id)
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("attach to session %s in %s: %w", sess.ID, id, err)
		}
		switch ev.Type {
		case apiv1.EventStdout:
			got += int64(len(ev.Data))
		case apiv1.EventStderr:
			if stderr.Len() < 1024 {
				stderr.Write(ev.Data)
			}
		case apiv1.EventTruncated:
			dropped += ev.Truncated.From - ev.Truncated.Requested
		case apiv1.EventExit:
			d = time.Since(start)
			if ev.ExitCode != 0 || ev.Error != "" {
				return 0, 0, 0, fmt.Errorf("session %s in %s: exit %d %s: %s", sess.ID, id, ev.ExitCode, ev.Error, strings.TrimSpace(stderr.String()))
			}
			if got+dropped != total {
				return 0, 0, 0, fmt.Errorf("session %s in %s: %d bytes received and %d dropped, want %d in all", sess.ID, id, got, dropped, total)
			}
			return got, dropped, d, nil
		}
	}
}

// attachFloor pipes the session's command into dd inside sandbox id,
// attachRuns times, and returns the median rate.
func (r *runner) attachFloor(ctx context.Context, id string, mib int) (float64, error) {
	total := int64(mib) << 20
	c, err := r.clockIn(ctx, id)
	if err != nil {
		return 0, err
	}
	rates := make([]float64, 0, attachRuns)
	for i := range attachRuns {
		d, err := r.timeInside(ctx, id, c, attachCommand(mib)+" | dd of=/dev/null bs=1048576")
		if err != nil {
			return 0, fmt.Errorf("run %d of %d: %w", i+1, attachRuns, err)
		}
		if d <= 0 {
			return 0, fmt.Errorf("run %d of %d: piping %d bytes took no time by the sandbox's clock", i+1, attachRuns, total)
		}
		rates = append(rates, mbPerS(total, d))
	}
	floor := median(rates)
	r.progress.printf("%s: %.1f MB/s inside the sandbox", KeyFloorAttachStream, floor)
	r.res.note(KeyFloorAttachStream, fmt.Sprintf("the same command piped into dd of=/dev/null bs=1M in the attach_stream sandbox (busybox dd prints no rate of its own), the median of %d runs; %s",
		attachRuns, c.describe()))
	return floor, nil
}

// mbPerS is bytes per d in MB (10^6 bytes) per second, to 0.1.
func mbPerS(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(bytes)/d.Seconds()/1e6*10) / 10
}

// median of values (the upper middle one of an even count).
func median(values []float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}
