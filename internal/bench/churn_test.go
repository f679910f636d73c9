package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		line string
		want procStat
		ok   bool
	}{
		{"812 (btrfs-cleaner) S 2 0 0 0 -1 2129984 0 0 0 0 7 1989 0 0 20 0 1 0 1234 0 0", procStat{"btrfs-cleaner", 2, 1996, 1234}, true},
		// A command may hold spaces and parentheses: the last ")" ends it.
		{"77 (kworker/u4:1-(btrfs) x) I 2 0 0 0 -1 69238880 0 0 0 0 0 45 0 0 20 0 1 0 9", procStat{"kworker/u4:1-(btrfs) x", 2, 45, 9}, true},
		{"1 (init) S 0 1 1 0 -1 4194560 100 0 0 0 3 4 0 0 20 0 1", procStat{}, false}, // cut before starttime
		{"garbage", procStat{}, false},
	} {
		got, ok := parseStat(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// Only kthreadd's children are read; other processes, and entries that are
// not processes, are left out.
func TestReadKernelThreads(t *testing.T) {
	root := t.TempDir()
	stat := func(pid, line string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat("2", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 1 0 0")
	stat("812", "812 (btrfs-cleaner) S 2 0 0 0 -1 2129984 0 0 0 0 7 193 0 0 20 0 1 0 1234 0 0")
	stat("90", "90 (kworker/1:2-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 50 0 0 20 0 1 0 9 0 0")
	stat("4000", "4000 (space) S 1 4000 4000 0 -1 4194560 0 0 0 0 900 900 0 0 20 0 30 0 99 0 0")
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := readKernelThreads(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[kernelThread]bool{
		{pid: 812, start: 1234, name: "btrfs-cleaner", cpu: 2 * time.Second}:         true,
		{pid: 90, start: 9, name: "kworker/1:2-events", cpu: 500 * time.Millisecond}: true,
	}
	if len(got) != len(want) || !want[got[0]] || !want[got[1]] {
		t.Errorf("read %+v; want %v", got, want)
	}
	if _, err := readKernelThreads(t.TempDir(), 100); err == nil {
		t.Error("a /proc without kernel threads read as none busy")
	}
}

func kthread(pid int, start int64, name string, cpu time.Duration) kernelThread {
	return kernelThread{pid: pid, start: start, name: name, cpu: cpu}
}

// A kworker with a long history that exits between readings keeps what it
// used; a thread born since counts from zero, also on a reused pid. The
// total never falls (a sum over the threads alive at both ends printed
// -423 ms a cycle).
func TestKernelCPUAccountKeepsExitedThreads(t *testing.T) {
	readings := [][]kernelThread{
		{
			kthread(40, 5, "kworker/u8:1-btrfs-endio-write", 100*time.Second),
			kthread(41, 6, "kworker/0:1-events", time.Second),
			kthread(812, 7, "btrfs-cleaner", 2*time.Second),
		},
		{ // 40 used 300 ms more and is still there
			kthread(40, 5, "kworker/u8:1-btrfs-endio-write", 100*time.Second+300*time.Millisecond),
			kthread(41, 6, "kworker/0:1-events", time.Second),
			kthread(812, 7, "btrfs-cleaner", 2*time.Second),
		},
		{ // 40 exited; a new thread got its pid; another was born
			kthread(40, 9000, "kworker/u8:4-btrfs-delalloc", 100*time.Millisecond),
			kthread(41, 6, "kworker/0:1-events", 1500*time.Millisecond),
			kthread(812, 7, "btrfs-cleaner", 2200*time.Millisecond),
			kthread(77, 9001, "kworker/u8:5-btrfs-qgroup-rescan", 300*time.Millisecond),
		},
	}
	var a kernelCPUAccount
	var prev time.Duration
	for i, r := range readings {
		a.add(r)
		if got := a.used().all; got < prev {
			t.Fatalf("after reading %d the kernel threads used %s, less than %s before", i, got, prev)
		} else {
			prev = got
		}
	}
	want := kernelCPU{all: (300 + 500 + 200 + 100 + 300) * time.Millisecond, cleaner: 200 * time.Millisecond}
	if got := a.used(); got != want {
		t.Errorf("used %+v; want %+v", got, want)
	}
}

// fakeKernel is a host's kernel threads whose CPU tests change between
// readings.
type fakeKernel struct {
	mu      sync.Mutex
	threads map[threadKey]kernelThread
	reads   int
	// onRead changes the threads before each reading.
	onRead func(k *fakeKernel)
}

func newFakeKernel(threads ...kernelThread) *fakeKernel {
	k := &fakeKernel{threads: map[threadKey]kernelThread{}}
	for _, t := range threads {
		k.set(t)
	}
	return k
}

func (k *fakeKernel) set(t kernelThread) { k.threads[threadKey{t.pid, t.start}] = t }

func (k *fakeKernel) work(pid int, d time.Duration) {
	for key, t := range k.threads {
		if key.pid == pid {
			t.cpu += d
			k.threads[key] = t
		}
	}
}

func (k *fakeKernel) exit(pid int) {
	for key := range k.threads {
		if key.pid == pid {
			delete(k.threads, key)
		}
	}
}

func (k *fakeKernel) locked(change func(k *fakeKernel)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	change(k)
}

func (k *fakeKernel) watch() kernelWatch {
	return kernelWatch{
		rule: quietRule{interval: time.Millisecond, busy: 10 * time.Millisecond, rounds: 3},
		read: func() ([]kernelThread, error) {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.reads++
			if k.onRead != nil {
				k.onRead(k)
			}
			out := make([]kernelThread, 0, len(k.threads))
			for _, t := range k.threads {
				out = append(out, t)
			}
			return out, nil
		},
	}
}

// A host whose kernel threads stay busy is never quiet, also when busy
// kworkers with long histories exit meanwhile (their exits once made a
// busy second read as a quiet one), and the wait ends at its bound.
func TestWaitQuietOnBusyHost(t *testing.T) {
	k := newFakeKernel(kthread(812, 7, "btrfs-cleaner", time.Second))
	for pid := 100; pid < 130; pid++ {
		k.set(kthread(pid, int64(pid), "kworker/u8:1-btrfs-endio-write", 60*time.Second))
	}
	exiting := 100
	k.onRead = func(k *fakeKernel) {
		k.work(812, 50*time.Millisecond)
		k.exit(exiting)
		exiting++
	}
	quiet, err := k.watch().waitQuiet(context.Background(), &kernelCPUAccount{}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if quiet {
		t.Error("a host busy with 50 ms of kernel CPU every reading counted as quiet")
	}
	if k.reads > 25 {
		t.Errorf("a wait bounded at 20 readings read %d times", k.reads)
	}

	k.onRead = nil
	if quiet, err := k.watch().waitQuiet(context.Background(), &kernelCPUAccount{}, 20*time.Millisecond); err != nil || !quiet {
		t.Errorf("an idle host: quiet %v, %v; want quiet", quiet, err)
	}
}

// churnRunner is a runner for churn alone against f, reading k.
func churnRunner(t *testing.T, f *fakeServer, k *fakeKernel, cycles int) *runner {
	cfg := fakeConfig(t, f)
	cfg.ChurnCycles = cycles
	cfg.ChurnQuietWait = 20 * time.Millisecond
	cfg = cfg.withDefaults()
	return &runner{
		cfg:      cfg,
		api:      cfg.Client,
		res:      &Result{Server: ServerInfo{Local: true}, Notes: map[string]string{}},
		progress: newProgress(io.Discard),
		tracked:  newTracker(),
		runID:    "churntest",
		kernel:   k.watch(),
	}
}

// Each create costs the kernel 50 ms (20 of them btrfs-cleaner's), and a
// kworker with minutes of history exits in the middle: the figure is the
// cycles' cost, not minus the kworker's past.
func TestChurnCountsWhatExitedThreadsUsed(t *testing.T) {
	f := newFakeServer(false, 0)
	k := newFakeKernel(
		kthread(812, 7, "btrfs-cleaner", time.Second),
		kthread(40, 5, "kworker/u8:1-btrfs-endio-write", 500*time.Second),
	)
	f.onCreate = func(n int) {
		k.locked(func(k *fakeKernel) {
			if n == 2 { // 40 exits; 41 takes over its work
				k.exit(40)
				k.set(kthread(41, 9000, "kworker/u8:2-btrfs-endio-write", 0))
			}
			k.work(812, 20*time.Millisecond)
			k.work(40, 30*time.Millisecond)
			k.work(41, 30*time.Millisecond)
		})
	}
	r := churnRunner(t, f, k, 4)
	if err := r.measureChurn(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := r.res.Churn
	if c == nil || !c.Trustworthy || !c.QuietBefore || !c.Settled || c.Doubt != "" {
		t.Fatalf("churn = %+v; want a trustworthy figure on a quiet host", c)
	}
	// What kworker 40 used in create 1 is kept: the runner read it after
	// that cycle, before the thread exited.
	if c.KernelCPUMSPerCycle == nil || *c.KernelCPUMSPerCycle != 50 || *c.CleanerCPUMSPerCycle != 20 {
		t.Errorf("kernel CPU per cycle %v, btrfs-cleaner %v; want 50 and 20", deref(c.KernelCPUMSPerCycle), deref(c.CleanerCPUMSPerCycle))
	}
}

// A host whose kernel threads never go quiet gets a figure marked not
// trustworthy, saying why, after waits bounded by ChurnQuietWait.
func TestChurnReportsABusyHost(t *testing.T) {
	f := newFakeServer(false, 0)
	k := newFakeKernel(kthread(900, 7, "kworker/u8:3-btrfs-qgroup-rescan", time.Second))
	k.onRead = func(k *fakeKernel) { k.work(900, 40*time.Millisecond) }
	r := churnRunner(t, f, k, 2)
	began := time.Now()
	if err := r.measureChurn(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("churn with 20 ms quiet waits took %s", took)
	}
	c := r.res.Churn
	if c == nil || c.Trustworthy || c.QuietBefore || c.Settled {
		t.Fatalf("churn = %+v; want it marked not trustworthy, the host not quiet before or after", c)
	}
	if !strings.Contains(c.Doubt, "before the first create") || !strings.Contains(c.Doubt, "after the last delete") {
		t.Errorf("doubt %q does not say the host was busy before and after", c.Doubt)
	}
}

// A reading no machine can show (more CPU than the CPUs had, or less than
// none) is left out, not printed.
func TestJudgeChurnLeavesOutImpossibleFigures(t *testing.T) {
	for _, used := range []kernelCPU{
		{all: 5 * time.Second},
		{all: -423 * time.Millisecond},
		{all: time.Second, cleaner: 2 * time.Second},
	} {
		c := judgeChurn(10, used, time.Second, 2, true, true, time.Minute)
		if c.Trustworthy || c.KernelCPUMSPerCycle != nil || c.CleanerCPUMSPerCycle != nil || !strings.Contains(c.Doubt, "impossible") {
			t.Errorf("used %+v in 1s on 2 CPUs: %+v; want no figure and the doubt", used, c)
		}
	}
	c := judgeChurn(10, kernelCPU{all: 52 * time.Millisecond, cleaner: 7 * time.Millisecond}, time.Second, 2, true, true, time.Minute)
	if !c.Trustworthy || deref(c.KernelCPUMSPerCycle) != 5.2 || deref(c.CleanerCPUMSPerCycle) != 0.7 {
		t.Errorf("52 ms over 10 cycles: %+v", c)
	}
}

func deref(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}
