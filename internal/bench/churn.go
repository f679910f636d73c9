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
	// quiet after the last delete, divided by the cycles. A thread that
	// exits meanwhile keeps what it used up to its last reading. Absent
	// when the reading was impossible (see Doubt).
	KernelCPUMSPerCycle *float64 `json:"kernel_cpu_ms_per_cycle,omitempty"`
	// CleanerCPUMSPerCycle is btrfs-cleaner's part of it.
	CleanerCPUMSPerCycle *float64 `json:"cleaner_cpu_ms_per_cycle,omitempty"`
	// SettleS is how long after the last delete the kernel threads took to
	// go quiet (churnQuiet); Settled is false when they had not within the
	// quiet wait (Config.ChurnQuietWait), and the CPU figures then stop
	// there.
	SettleS float64 `json:"settle_s"`
	Settled bool    `json:"settled"`
	// QuietBefore is whether the kernel threads went quiet before the first
	// create, within the same wait: when they did not, something else (an
	// earlier measurement's deletes, another filesystem) kept them busy and
	// its work is in the figures too.
	QuietBefore bool `json:"quiet_before"`
	// Trustworthy is false when the figures are not the cycles' cost: the
	// host was not quiet before the first create or after the last delete,
	// or the figure is impossible. Doubt says which.
	Trustworthy bool   `json:"trustworthy"`
	Doubt       string `json:"doubt,omitempty"`
}

// KeyChurn is the measurement's key.
const KeyChurn = "churn"

const (
	// DefaultChurnCycles is how many create → delete cycles a run makes.
	DefaultChurnCycles = 100
	// DefaultChurnQuietWait bounds each wait for the kernel threads to go
	// quiet (before the first create and after the last delete). The
	// backlog of 500 deletes settled in 10 s on simple quotas and 300 in
	// 21 s on full qgroups (docs/performance.md): a host still busy after
	// a minute is busy with something else.
	DefaultChurnQuietWait = time.Minute
)

// quietRule is when the kernel threads count as quiet: under busy of CPU
// time in each of rounds readings, interval apart, in a row.
type quietRule struct {
	interval time.Duration
	busy     time.Duration
	rounds   int
}

// churnQuiet is 1% of one CPU for 3 s.
var churnQuiet = quietRule{interval: time.Second, busy: 10 * time.Millisecond, rounds: 3}

func (q quietRule) String() string {
	return fmt.Sprintf("under %s of CPU in each %s, %d in a row", q.busy, q.interval, q.rounds)
}

// kthreadd is the parent of every kernel thread.
const kthreadd = 2

// kernelCPU is the CPU time kernel threads have used.
type kernelCPU struct {
	all, cleaner time.Duration
}

// kernelThread is one reading of one kernel thread.
type kernelThread struct {
	pid int
	// start is when it started, in clock ticks after boot: with pid it
	// tells a thread from a later one that got the same pid.
	start int64
	name  string
	cpu   time.Duration
}

// readKernelThreads reads utime + stime of the kernel threads under
// procRoot (/proc).
func readKernelThreads(procRoot string, ticksPerSecond int64) ([]kernelThread, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var threads []kernelThread
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		st, ok := parseStat(string(raw))
		if !ok || st.ppid != kthreadd {
			continue
		}
		threads = append(threads, kernelThread{
			pid:   pid,
			start: st.start,
			name:  st.name,
			cpu:   time.Duration(st.ticks) * time.Second / time.Duration(ticksPerSecond),
		})
	}
	if len(threads) == 0 {
		return nil, errors.New("no kernel threads found in " + procRoot)
	}
	return threads, nil
}

// procStat is what churn needs of a /proc/<pid>/stat line.
type procStat struct {
	name  string
	ppid  int
	ticks int64 // utime + stime
	start int64 // starttime
}

// parseStat reads a /proc/<pid>/stat line: the command (in parentheses,
// which may hold spaces and parentheses), the parent's pid, utime + stime
// and the start time, in clock ticks.
func parseStat(line string) (procStat, bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	// After ") ": state(3) ppid(4) ... utime(14) stime(15) ... starttime(22).
	f := strings.Fields(line[end+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	start, err3 := strconv.ParseInt(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procStat{}, false
	}
	return procStat{name: line[open+1 : end], ppid: ppid, ticks: utime + stime, start: start}, true
}

// kernelCPUAccount adds up the CPU time kernel threads use from its first
// reading on. It keeps every thread it has seen, so one that exits keeps
// what it used up to its last reading: a sum over the threads alive at
// two readings falls when a kworker with a long history exits, and once
// printed -423 ms a cycle. A thread first seen after the first reading
// started since and counts from zero. Its total never falls.
type kernelCPUAccount struct {
	threads map[threadKey]*threadUse
}

type threadKey struct {
	pid   int
	start int64
}

// threadUse is one thread's CPU time at its first and its latest reading.
type threadUse struct {
	first, last time.Duration
	cleaner     bool
}

func (a *kernelCPUAccount) add(threads []kernelThread) {
	baseline := a.threads == nil
	if baseline {
		a.threads = map[threadKey]*threadUse{}
	}
	for _, t := range threads {
		k := threadKey{pid: t.pid, start: t.start}
		u, ok := a.threads[k]
		if !ok {
			u = &threadUse{cleaner: t.name == "btrfs-cleaner"}
			if baseline {
				u.first, u.last = t.cpu, t.cpu
			}
			a.threads[k] = u
		}
		u.last = max(u.last, t.cpu)
	}
}

// used is the CPU time the threads used since the first reading.
func (a *kernelCPUAccount) used() kernelCPU {
	var sum kernelCPU
	for _, u := range a.threads {
		d := u.last - u.first
		sum.all += d
		if u.cleaner {
			sum.cleaner += d
		}
	}
	return sum
}

// kernelWatch reads the kernel threads into an account.
type kernelWatch struct {
	read func() ([]kernelThread, error)
	rule quietRule
}

// procKernelWatch reads this machine's /proc; userHZ is the clock tick of
// its times: 100 on every Linux this runs on (USER_HZ is fixed by the ABI,
// whatever the kernel's HZ).
func procKernelWatch() kernelWatch {
	const userHZ = 100
	return kernelWatch{
		read: func() ([]kernelThread, error) { return readKernelThreads("/proc", userHZ) },
		rule: churnQuiet,
	}
}

func (w kernelWatch) readInto(a *kernelCPUAccount) error {
	threads, err := w.read()
	if err != nil {
		return err
	}
	a.add(threads)
	return nil
}

// waitQuiet reads the kernel threads into a every interval of the rule
// until they are quiet (true) or bound has passed (false).
func (w kernelWatch) waitQuiet(ctx context.Context, a *kernelCPUAccount, bound time.Duration) (bool, error) {
	if err := w.readInto(a); err != nil {
		return false, err
	}
	prev := a.used().all
	quiet := 0
	for range max(1, int(bound/w.rule.interval)) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(w.rule.interval):
		}
		if err := w.readInto(a); err != nil {
			return false, err
		}
		cur := a.used().all
		if cur-prev < w.rule.busy {
			quiet++
			if quiet >= w.rule.rounds {
				return true, nil
			}
		} else {
			quiet = 0
		}
		prev = cur
	}
	return false, nil
}

// measureChurn waits for the kernel threads to go quiet, runs the
// create → delete cycles one after another and reads the kernel threads'
// CPU around them, waiting after the last delete until the threads go
// quiet again (a backlog of deferred subvolume deletion shows here, not in
// the cycles' own time). The threads are read after every cycle, so one
// that exits loses only what it used since the last reading.
func (r *runner) measureChurn(ctx context.Context) error {
	if !r.res.Server.Local {
		return &absentError{reason: "the server is not on this machine: the kernel's threads are read from /proc"}
	}
	w, bound := r.kernel, r.cfg.ChurnQuietWait
	r.progress.printf("%s: waiting for the kernel's threads to go quiet before the first create (at most %s)", KeyChurn, bound)
	quietBefore, err := w.waitQuiet(ctx, &kernelCPUAccount{}, bound)
	if err != nil {
		return err
	}
	var acct kernelCPUAccount
	if err := w.readInto(&acct); err != nil {
		return err
	}
	cycles := r.cfg.ChurnCycles
	r.progress.printf("%s: %d create → delete cycles", KeyChurn, cycles)
	began := time.Now()
	for i := range cycles {
		if _, err := r.createAndDelete(ctx, i); err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		if err := w.readInto(&acct); err != nil {
			return err
		}
		if (i+1)%max(1, cycles/10) == 0 {
			r.progress.printf("%s: %d/%d cycles in %s", KeyChurn, i+1, cycles, time.Since(began).Round(time.Second))
		}
	}
	lastDelete := time.Now()
	r.progress.printf("%s: waiting for the kernel's threads to go quiet (at most %s)", KeyChurn, bound)
	settled, err := w.waitQuiet(ctx, &acct, bound)
	if err != nil {
		return err
	}
	settle := time.Since(lastDelete)
	if settled {
		// The quiet readings that proved it are not part of the backlog.
		settle -= time.Duration(w.rule.rounds) * w.rule.interval
	}
	c := judgeChurn(cycles, acct.used(), time.Since(began), r.res.Server.CPUs, quietBefore, settled, bound)
	c.SettleS = math.Round(max(settle, 0).Seconds()*10) / 10
	r.res.Churn = c
	r.res.note(KeyChurn, fmt.Sprintf("kernel threads' CPU (utime+stime of kthreadd's children in /proc, read after every cycle and every %s of the waits, kept for threads that exit) from the first create until they were quiet (%s) after the last delete, per cycle; cycles one at a time, each create waited for until running; the threads were first let go quiet the same way",
		w.rule.interval, w.rule))
	if !c.Trustworthy {
		r.progress.printf("%s: NOT TRUSTWORTHY: %s", KeyChurn, c.Doubt)
		return nil
	}
	r.progress.printf("%s: %.1f ms of kernel CPU per cycle (btrfs-cleaner %.1f), quiet %.1f s after the last delete",
		KeyChurn, *c.KernelCPUMSPerCycle, *c.CleanerCPUMSPerCycle, c.SettleS)
	return nil
}

// judgeChurn turns what the kernel threads used over wall (from the first
// create to the end of the wait) into per-cycle figures, and says whether
// they can be trusted: not when the host was busy before or after the
// cycles, nor when the reading is one no machine of cpus CPUs can show
// (then the figures are left out, not printed wrong).
func judgeChurn(cycles int, used kernelCPU, wall time.Duration, cpus int, quietBefore, settled bool, bound time.Duration) *Churn {
	c := &Churn{Cycles: cycles, Settled: settled, QuietBefore: quietBefore}
	var doubts []string
	if !quietBefore {
		doubts = append(doubts, fmt.Sprintf("the kernel's threads were not quiet within %s before the first create, so other work (an earlier measurement's deletes, another load on the host) is counted too", bound))
	}
	if !settled {
		doubts = append(doubts, fmt.Sprintf("the kernel's threads were still busy %s after the last delete: the host is not quiet, or the deletes' backlog outlasted the wait (raise --churn-quiet-wait)", bound))
	}
	if used.all < 0 || used.cleaner < 0 || used.cleaner > used.all || cpus > 0 && used.all > wall*time.Duration(cpus) {
		doubts = append(doubts, fmt.Sprintf("the kernel's threads read %s of CPU (btrfs-cleaner %s) in %s on %d CPUs, which is impossible", used.all, used.cleaner, wall.Round(time.Millisecond), cpus))
	} else {
		perCycle := func(d time.Duration) *float64 {
			ms := math.Round(float64(d)/float64(time.Millisecond)/float64(cycles)*10) / 10
			return &ms
		}
		c.KernelCPUMSPerCycle, c.CleanerCPUMSPerCycle = perCycle(used.all), perCycle(used.cleaner)
	}
	c.Trustworthy = len(doubts) == 0
	c.Doubt = strings.Join(doubts, "; ")
	return c
}
