package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Churn is what create → delete cycles cost the host's kernel: the work
// that no sandbox's cgroup is charged for, such as btrfs deleting a
// subvolume and its qgroup accounting (btrfs-cleaner, btrfs-transaction,
// kworkers). It is read from /proc, so only on the server's own machine.
type Churn struct {
	Cycles int `json:"cycles"`
	// KernelCPUMSPerCycle is the CPU time of every kernel thread (the
	// children of kthreadd) from the first create until the threads went
	// quiet after the last delete, divided by the cycles.
	KernelCPUMSPerCycle float64 `json:"kernel_cpu_ms_per_cycle"`
	// CleanerCPUMSPerCycle is btrfs-cleaner's part of it.
	CleanerCPUMSPerCycle float64 `json:"cleaner_cpu_ms_per_cycle"`
	// SettleS is how long after the last delete the kernel threads took to
	// go quiet (under churnQuietMS of CPU in a second, churnQuietSeconds
	// seconds in a row); Settled is false when they had not within
	// churnSettleBound, and the CPU figures then stop there.
	SettleS float64 `json:"settle_s"`
	Settled bool    `json:"settled"`
}

// KeyChurn is the measurement's key.
const KeyChurn = "churn"

const (
	// DefaultChurnCycles is how many create → delete cycles a run makes.
	DefaultChurnCycles = 100
	churnSettleBound   = 5 * time.Minute
	churnQuietMS       = 10 // 1% of one CPU
	churnQuietSeconds  = 3
)

// kthreadd is the parent of every kernel thread.
const kthreadd = 2

// kernelCPU is the CPU time kernel threads have used so far.
type kernelCPU struct {
	all, cleaner time.Duration
}

// readKernelCPU sums utime and stime of the kernel threads under procRoot
// (/proc). A thread that exited since an earlier reading is missing from
// the later one: kworkers live long, so the loss is small, and it can only
// make the figure lower.
func readKernelCPU(procRoot string, ticksPerSecond int64) (kernelCPU, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return kernelCPU{}, err
	}
	var sum kernelCPU
	seen := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		name, ppid, ticks, ok := parseStat(string(raw))
		if !ok || ppid != kthreadd {
			continue
		}
		seen++
		d := time.Duration(ticks) * time.Second / time.Duration(ticksPerSecond)
		sum.all += d
		if name == "btrfs-cleaner" {
			sum.cleaner += d
		}
	}
	if seen == 0 {
		return kernelCPU{}, errors.New("no kernel threads found in " + procRoot)
	}
	return sum, nil
}

// parseStat reads a /proc/<pid>/stat line: the command (in parentheses,
// which may hold spaces and parentheses), the parent's pid and utime +
// stime in clock ticks.
func parseStat(line string) (name string, ppid int, ticks int64, ok bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", 0, 0, false
	}
	name = line[open+1 : end]
	// After ") ": state(3) ppid(4) ... utime(14) stime(15).
	f := strings.Fields(line[end+1:])
	if len(f) < 13 {
		return "", 0, 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return name, ppid, utime + stime, true
}

// userHZ is the clock tick of /proc's times: 100 on every Linux this runs
// on (USER_HZ is fixed by the ABI, whatever the kernel's HZ).
const userHZ = 100

// measureChurn runs the create → delete cycles one after another and
// reads the kernel threads' CPU around them, waiting after the last
// delete until the threads go quiet (a backlog of deferred subvolume
// deletion shows here, not in the cycles' own time).
func (r *runner) measureChurn(ctx context.Context) error {
	if !r.res.Server.Local {
		return &absentError{reason: "the server is not on this machine: the kernel's threads are read from /proc"}
	}
	before, err := readKernelCPU("/proc", userHZ)
	if err != nil {
		return err
	}
	cycles := r.cfg.ChurnCycles
	r.progress.printf("%s: %d create → delete cycles", KeyChurn, cycles)
	began := time.Now()
	for i := range cycles {
		if _, err := r.createAndDelete(ctx, i); err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		if (i+1)%max(1, cycles/10) == 0 {
			r.progress.printf("%s: %d/%d cycles in %s", KeyChurn, i+1, cycles, time.Since(began).Round(time.Second))
		}
	}
	lastDelete := time.Now()
	r.progress.printf("%s: waiting for the kernel's threads to go quiet (at most %s)", KeyChurn, churnSettleBound)
	settled, err := waitKernelQuiet(ctx, "/proc", churnSettleBound)
	if err != nil {
		return err
	}
	after, err := readKernelCPU("/proc", userHZ)
	if err != nil {
		return err
	}
	perCycle := func(d time.Duration) float64 {
		return math.Round(float64(d)/float64(time.Millisecond)/float64(cycles)*10) / 10
	}
	c := &Churn{
		Cycles:               cycles,
		KernelCPUMSPerCycle:  perCycle(after.all - before.all),
		CleanerCPUMSPerCycle: perCycle(after.cleaner - before.cleaner),
		Settled:              settled,
	}
	settle := time.Since(lastDelete)
	if settled {
		// The quiet seconds that proved it are not part of the backlog.
		settle -= churnQuietSeconds * time.Second
	}
	c.SettleS = math.Round(max(settle, 0).Seconds()*10) / 10
	r.res.Churn = c
	r.res.note(KeyChurn, fmt.Sprintf("kernel threads' CPU (utime+stime of kthreadd's children in /proc) from the first create until they were quiet (<%d ms of CPU a second for %d s) after the last delete, per cycle; cycles one at a time, each create waited for until running",
		churnQuietMS, churnQuietSeconds))
	r.progress.printf("%s: %.1f ms of kernel CPU per cycle (btrfs-cleaner %.1f), quiet %.1f s after the last delete",
		KeyChurn, c.KernelCPUMSPerCycle, c.CleanerCPUMSPerCycle, c.SettleS)
	return nil
}

// waitKernelQuiet waits until the kernel threads use under churnQuietMS of
// CPU a second for churnQuietSeconds seconds in a row, or bound passes
// (then it reports false).
func waitKernelQuiet(ctx context.Context, procRoot string, bound time.Duration) (bool, error) {
	deadline := time.Now().Add(bound)
	prev, err := readKernelCPU(procRoot, userHZ)
	if err != nil {
		return false, err
	}
	quiet := 0
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
		cur, err := readKernelCPU(procRoot, userHZ)
		if err != nil {
			return false, err
		}
		if cur.all-prev.all < churnQuietMS*time.Millisecond {
			quiet++
			if quiet >= churnQuietSeconds {
				return true, nil
			}
		} else {
			quiet = 0
		}
		prev = cur
	}
	return false, nil
}
