package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/bench"
	"github.com/space-platform/space/pkg/client"
)

func runBench(ctx context.Context, args []string) error {
	fs := newFlagSet("space bench [flags]", `
Measure a running space server: create latency (with and without a warm
pool), create to first command, exec round trip, a stat and a 4 KiB read,
1 MiB file write+read, a session's output streamed through attach,
pause/resume, suspend, resume from suspend, snapshot and branch of a
sandbox holding data in memory, creates per second at several
concurrencies, the kernel's CPU per create → delete cycle (churn: btrfs
deleting subvolumes, read from /proc), idle sandboxes per node, and bare
runsc run/restore baselines. Prints min/p50/p95/p99 in
milliseconds; see docs/performance.md for what each figure means.

The hot paths come with floors taken in the same run (skip them with
--skip floors): the same work done inside the same sandbox and timed there
(a spawn of /bin/true, dd of 1 MiB with fsync, the session's output piped
to dd), and the node's claim of a pooled sandbox as the server times it;
the ratios divide each figure by its floor.

--runtime microvm measures microVM sandboxes instead (the template must be
built for microvm; its warm pool serves them only when microvm is its
default runtime): the creates, exec, file, lifecycle figures, and beside
them two floors booted by bare QEMU on this host, the guest kernel alone
(baseline_qemu_kernel) and the kernel with the server's initramfs and the
template's image up to the agent (baseline_qemu_boot). Throughput, churn
and density are not taken on microvm.

Every sandbox it creates is deleted again. The density and churn
measurements and the baselines read the server host's cgroups and /proc and
run runsc: run as root on the server's machine for those.`)
	cfg := bench.Config{FillMiB: -1}
	fs.StringVar(&cfg.Template, "template", "minimal", "template to create sandboxes from")
	fs.StringVar(&cfg.Runtime, "runtime", "gvisor", "sandbox runtime to measure: gvisor or microvm")
	fs.StringVar(&cfg.QEMUPath, "qemu", "", "qemu-system-x86_64 for the microvm floors (default: from PATH)")
	fs.StringVar(&cfg.KernelDir, "microvm-kernel", "", "guest kernel directory for the microvm floors (default: as space serve finds it)")
	fs.IntVar(&cfg.Samples, "n", bench.DefaultSamples, "samples per latency measurement")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	skip := fs.String("skip", "", "comma-separated measurements to skip, e.g. density,throughput (groups: create, lifecycle, baselines, floors)")
	fs.IntVar(&cfg.DensityMax, "density-max", bench.DefaultDensityMax, "most idle sandboxes the density measurement creates")
	fs.IntVar(&cfg.MemoryMB, "memory-mb", 0, fmt.Sprintf("memory of the sandbox the lifecycle figures are taken on (default %d; %d on microvm)", bench.DefaultMemoryMB, bench.DefaultMicroVMMemoryMB))
	var fill optionalInt
	fs.Var(&fill, "fill-mib", "`MiB` of random data the lifecycle sandbox keeps in memory (default: an eighth of --memory-mb, a sixteenth on microvm; see docs/performance.md)")
	fs.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "the server's --data-dir (for the baselines)")
	fs.StringVar(&cfg.RunscPath, "runsc", "", "runsc binary for the baselines (default: as space serve finds it)")
	fs.DurationVar(&cfg.ThroughputWindow, "throughput-window", bench.DefaultThroughputWindow, "how long each throughput level runs")
	fs.IntVar(&cfg.ChurnCycles, "churn-cycles", bench.DefaultChurnCycles, "create → delete cycles of the churn measurement (the kernel's CPU per cycle)")
	fs.DurationVar(&cfg.ChurnQuietWait, "churn-quiet-wait", bench.DefaultChurnQuietWait, "longest wait for the kernel's threads to go quiet before the churn cycles and after them; past it the churn figure is marked not trustworthy")
	fs.IntVar(&cfg.AttachMiB, "attach-mib", bench.DefaultAttachMiB, "`MiB` of output the attach_stream session writes (each of its runs, and its floor's)")
	concurrency := fs.String("concurrency", joinLevels(bench.DefaultConcurrency), "comma-separated throughput concurrency levels")
	if err := parseNoArgs(fs, args, "bench"); err != nil {
		return err
	}
	if fill.set {
		cfg.FillMiB = fill.value
	}
	var err error
	if cfg.Skip, err = bench.ParseSkip(*skip); err != nil {
		return fs.usageErrorf("--skip: %v", err)
	}
	if cfg.Concurrency, err = parseLevels(*concurrency); err != nil {
		return fs.usageErrorf("--concurrency: %v", err)
	}
	if err := bench.CheckRuntime(cfg.Runtime); err != nil {
		return fs.usageErrorf("--runtime: %v", err)
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = bench.DefaultMemoryMB
		if cfg.Runtime == "microvm" {
			cfg.MemoryMB = bench.DefaultMicroVMMemoryMB
		}
	}
	if cfg.Samples < 1 || cfg.DensityMax < 1 || cfg.MemoryMB < 32 || cfg.ThroughputWindow <= 0 || cfg.ChurnCycles < 1 || cfg.AttachMiB < 1 || cfg.ChurnQuietWait <= 0 {
		return fs.usageErrorf("--n, --density-max, --churn-cycles and --attach-mib must be at least 1, --memory-mb at least 32, --throughput-window and --churn-quiet-wait positive")
	}
	if fill.set && (fill.value < 0 || fill.value >= cfg.MemoryMB) {
		return fs.usageErrorf("--fill-mib %d must be at least 0 and well below --memory-mb %d: a sandbox at its limit stalls", fill.value, cfg.MemoryMB)
	}
	if cfg.Runtime == "gvisor" {
		if cfg.RunscPath, err = bench.FindRunsc(cfg.RunscPath); err != nil {
			fmt.Fprintf(stderr, "bench: %v; the baselines will be absent\n", err)
		}
	}
	if err := connectBench(&cfg); err != nil {
		return err
	}
	cfg.Progress = stderr

	// Ctrl-C ends the run early; Run still deletes what it created.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, runErr := bench.Run(ctx, cfg)
	if res != nil {
		if *asJSON {
			if err := printJSON(res); err != nil {
				return err
			}
		} else if err := printBenchTable(res); err != nil {
			return err
		}
	}
	return runErr
}

// connectBench sets up the API client. Many concurrent creates need more
// idle connections than Go's default of two per host, or every request
// pays for a new one.
func connectBench(cfg *bench.Config) error {
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}
	c, err := client.FromEnv(client.WithUserAgent("space-bench"), client.WithHTTPClient(hc))
	if err != nil {
		return err
	}
	cfg.Client = c
	return nil
}

func defaultDataDir() string {
	if dir := os.Getenv("SPACE_DATA_DIR"); dir != "" {
		return dir
	}
	return client.DefaultDataDir
}

// printBenchTable prints the result for people: latencies as a table,
// then throughput, density, ratios and notes.
func printBenchTable(res *bench.Result) error {
	on := ""
	if res.Runtime != "" {
		on = " on " + res.Runtime
	}
	fmt.Fprintf(stdout, "template %s (%s)%s on %s, %d CPUs, %d MiB, kernel %s, %s\n\n",
		res.Template.Name, shortID(res.Template.ID), on, res.Server.URL, res.Server.CPUs, res.Server.MemoryMiB, res.Server.Kernel, res.StartedAt.Format(time.RFC3339))
	t := newTable(stdout, "MEASUREMENT", "N", "MIN ms", "P50 ms", "P95 ms", "P99 ms")
	for _, l := range res.Latencies() {
		if l.Summary == nil {
			t.row(l.Key, "-", "-", "-", "-", "-")
			continue
		}
		s := l.Summary
		t.row(l.Key, strconv.Itoa(s.N), millisCell(s.MinMS), millisCell(s.P50MS), millisCell(s.P95MS), millisCell(s.P99MS))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if a := res.AttachStream; a != nil {
		line := fmt.Sprintf("attach stream (%d MiB, median of %d): ", a.MiB, a.Runs)
		if a.MBPerS > 0 {
			line += fmt.Sprintf("%.1f MB/s received", a.MBPerS)
			if a.DroppedBytes > 0 {
				line += fmt.Sprintf(" (%d bytes dropped)", a.DroppedBytes)
			}
		} else {
			line += "-"
		}
		if a.FloorMBPerS != nil {
			line += fmt.Sprintf("; floor inside the sandbox %.1f MB/s", *a.FloorMBPerS)
		}
		fmt.Fprintf(stdout, "\n%s\n", line)
	}
	if len(res.Throughput) > 0 {
		levels := make([]string, 0, len(res.Throughput))
		for c := range res.Throughput {
			levels = append(levels, c)
		}
		sort.Slice(levels, func(i, j int) bool { return levelNumber(levels[i]) < levelNumber(levels[j]) })
		parts := make([]string, len(levels))
		for i, c := range levels {
			parts[i] = fmt.Sprintf("c=%s %.2f/s", c, res.Throughput[c])
		}
		fmt.Fprintf(stdout, "\nthroughput (creates reaching running per second): %s\n", strings.Join(parts, ", "))
	}
	if d := res.Density; d != nil {
		fmt.Fprintf(stdout, "\ndensity: %d idle sandboxes (%s); per sandbox: %s MiB by cgroup, %s MiB RSS, %s MiB PSS\n",
			d.Sandboxes, d.StoppedBy, optionalCell(d.MiBPerSandbox), optionalCell(d.RSSMiBPerSandbox), optionalCell(d.PSSMiBPerSandbox))
	}
	if c := res.Churn; c != nil {
		printChurn(stdout, c)
	}
	if l := res.Lifecycle; l != nil {
		fmt.Fprintf(stdout, "\nlifecycle sandbox: memory_mb %d holding %d MiB of data (%.0f MiB accounted)\n", l.MemoryMB, l.FillMiB, l.UsedMiB)
	}
	if len(res.Ratios) > 0 {
		fmt.Fprintln(stdout, "\nratios of p50s:")
		for _, k := range sortedMapKeys(res.Ratios) {
			fmt.Fprintf(stdout, "  %s = %.2f\n", k, res.Ratios[k])
		}
	}
	if len(res.Notes) > 0 {
		fmt.Fprintln(stdout, "\nnotes:")
		for _, k := range sortedMapKeys(res.Notes) {
			fmt.Fprintf(stdout, "  %s: %s\n", k, res.Notes[k])
		}
	}
	return nil
}

// printChurn prints the churn figures or, when they are not to be trusted,
// why, and what was read only as a reading.
func printChurn(w io.Writer, c *bench.Churn) {
	if !c.Trustworthy {
		fmt.Fprintf(w, "\nchurn: NOT TRUSTWORTHY: %s.", c.Doubt)
		if c.KernelCPUMSPerCycle != nil {
			fmt.Fprintf(w, " Over %d create → delete cycles the kernel's threads read %.1f ms of CPU a cycle (btrfs-cleaner %.1f), which is not the cycles' cost alone.",
				c.Cycles, *c.KernelCPUMSPerCycle, *c.CleanerCPUMSPerCycle)
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "\nchurn: %d create → delete cycles cost the kernel %.1f ms of CPU each (btrfs-cleaner %.1f); quiet %.1f s after the last delete\n",
		c.Cycles, *c.KernelCPUMSPerCycle, *c.CleanerCPUMSPerCycle, c.SettleS)
}

// optionalInt is an int flag that knows whether it was given, for a
// default that depends on another flag.
type optionalInt struct {
	set   bool
	value int
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.value)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.set, o.value = true, n
	return nil
}

func millisCell(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func optionalCell(v *float64) string {
	if v == nil {
		return "?"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

func levelNumber(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func parseLevels(list string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		n, err := strconv.Atoi(item)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", item)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no levels given")
	}
	return out, nil
}

func joinLevels(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
