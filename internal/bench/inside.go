package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// The floors time work inside the sandbox with what the minimal template
// has: busybox. Its date has no %N and no helper binary can be copied in,
// so the clock is busybox ts, which stamps the lines it reads with
// gettimeofday's microseconds (-i: since the previous line); a busybox
// without ts falls back to /proc/uptime, read by the shell itself, in
// hundredths of a second, and the loops then run longer.

// insideClock is how a sandbox times a shell fragment.
type insideClock struct {
	// ts is set when busybox ts is there; otherwise /proc/uptime.
	ts bool
	// overhead is an empty fragment timed the same way (the median of
	// insideProbes): what the clock itself adds to a reading.
	overhead time.Duration
}

const (
	insideProbes = 3
	// uptimeScale is how much longer the loops run on /proc/uptime's
	// 10 ms clock than on ts's microseconds.
	uptimeScale = 10
	// insideTimeoutS bounds one timed exec.
	insideTimeoutS = 300
)

// describe says how the floors were timed, for their notes.
func (c insideClock) describe() string {
	if c.ts {
		return fmt.Sprintf("timed inside with busybox ts -i (gettimeofday, 1 µs resolution; an empty fragment reads %s)", fmtDuration(c.overhead))
	}
	return fmt.Sprintf("timed inside with /proc/uptime (10 ms resolution; no busybox ts in the template; loops %d× longer; an empty fragment reads %s)", uptimeScale, fmtDuration(c.overhead))
}

// loops scales a loop count for the clock's resolution.
func (c insideClock) loops(n int) int {
	if c.ts {
		return n
	}
	return n * uptimeScale
}

// script wraps body so that its run is timed inside the sandbox. The body's
// stdout is discarded (ts reads the markers from the same pipe), its stderr
// is the exec's. On ts, a first line and a short sleep let ts start and
// wait in read before "begin", so that its stamp is not that of ts's own
// start.
func (c insideClock) script(body string) string {
	if c.ts {
		return "{ echo ready; sleep 0.05; echo begin; { " + body + "; } >/dev/null; echo \"end $?\"; } | ts -i %.s"
	}
	return "read a _ </proc/uptime; { " + body + "; } >/dev/null; s=$?; read b _ </proc/uptime; echo \"uptime $a $b $s\""
}

// parse reads the duration of the body from the script's stdout.
func (c insideClock) parse(stdout string) (time.Duration, error) {
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(line)
		switch {
		case c.ts && len(f) == 3 && f[1] == "end":
			if f[2] != "0" {
				return 0, fmt.Errorf("the timed commands exited %s", f[2])
			}
			return parseSeconds(f[0])
		case !c.ts && len(f) == 4 && f[0] == "uptime":
			if f[3] != "0" {
				return 0, fmt.Errorf("the timed commands exited %s", f[3])
			}
			a, err1 := parseSeconds(f[1])
			b, err2 := parseSeconds(f[2])
			if err := errors.Join(err1, err2); err != nil {
				return 0, err
			}
			return b - a, nil
		}
	}
	// A failing command in a loop exits the timed group before its end
	// marker; its stderr says why.
	return 0, fmt.Errorf("the timed commands failed (no end marker in %q)", stdout)
}

func parseSeconds(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a number of seconds", s)
	}
	return time.Duration(math.Round(v * float64(time.Second))), nil
}

// timeInside runs body in sandbox id under the clock and returns how long
// it took there.
func (r *runner) timeInside(ctx context.Context, id string, c insideClock, body string) (time.Duration, error) {
	res, err := r.api.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"sh", "-c", c.script(body)}, TimeoutS: insideTimeoutS})
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("timed script in %s: exit %d: %s", id, res.ExitCode, tail(res.Stderr))
	}
	d, err := c.parse(res.Stdout)
	if err != nil {
		if msg := tail(res.Stderr); msg != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, msg)
		}
		return 0, fmt.Errorf("timed script in %s: %w", id, err)
	}
	return d, nil
}

// clockIn finds how sandbox id can time itself, once per run (every
// sandbox of a run is of the same template): ts if an empty fragment
// times with it, else /proc/uptime.
func (r *runner) clockIn(ctx context.Context, id string) (insideClock, error) {
	if r.clock != nil {
		return *r.clock, nil
	}
	var errs []error
	for _, c := range []insideClock{{ts: true}, {ts: false}} {
		readings := make([]time.Duration, 0, insideProbes)
		var err error
		for range insideProbes {
			var d time.Duration
			if d, err = r.timeInside(ctx, id, c, ":"); err != nil {
				break
			}
			readings = append(readings, d)
		}
		if err != nil {
			if ctx.Err() != nil {
				return insideClock{}, ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		slices.Sort(readings)
		c.overhead = readings[len(readings)/2]
		r.clock = &c
		return c, nil
	}
	return insideClock{}, fmt.Errorf("no clock inside the sandbox: %w", errors.Join(errs...))
}

// loopScript runs cmd n times, stopping at its first failure.
func loopScript(n int, cmd string) string {
	return fmt.Sprintf("i=0; while [ $i -lt %d ]; do %s || exit $?; i=$((i+1)); done", n, cmd)
}

func fmtDuration(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// tail is the end of a command's stderr, enough for its error: dd also
// writes its record counts there, once per copy.
func tail(stderr string) string {
	const keep = 400
	stderr = strings.TrimSpace(stderr)
	if len(stderr) > keep {
		return "..." + stderr[len(stderr)-keep:]
	}
	return stderr
}
