package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// Config is what Run measures and how.
type Config struct {
	Client *client.Client
	// Template the sandboxes are created from.
	Template string
	// Runtime is the backend the sandboxes run on: "gvisor" (the default)
	// or "microvm", which the template must have been built for.
	Runtime string
	// QEMUPath and KernelDir are what the microvm floors boot (default:
	// qemu-system-x86_64 from PATH, and the kernel space serve finds).
	QEMUPath  string
	KernelDir string
	// Samples per latency measurement.
	Samples int
	// Skip holds measurement keys not to run (see ParseSkip).
	Skip map[string]bool
	// DensityMax bounds the idle sandboxes the density measurement creates.
	DensityMax int
	// MemoryMB is the memory limit of the lifecycle sandbox, and FillMiB the
	// incompressible data it writes to its tmpfs so its memory image has
	// real weight; a negative FillMiB picks DefaultFillMiB(MemoryMB).
	MemoryMB int
	FillMiB  int
	// DataDir is the server's --data-dir, where the baselines find the
	// template's volume and pre-booted image.
	DataDir string
	// RunscPath is the runsc binary the baselines run.
	RunscPath string
	// ThroughputWindow is how long each concurrency level creates sandboxes;
	// Concurrency lists the levels.
	ThroughputWindow time.Duration
	Concurrency      []int
	// ChurnCycles is how many create → delete cycles the churn
	// measurement makes.
	ChurnCycles int
	// ChurnQuietWait bounds each of the churn measurement's waits for the
	// kernel's threads to go quiet, before its first create and after its
	// last delete.
	ChurnQuietWait time.Duration
	// AttachMiB is how much output the attach_stream session writes.
	AttachMiB int
	// Progress receives one line per measurement as it starts and ends, and
	// periodic lines from the long ones.
	Progress io.Writer
}

// Defaults of Config's fields that `space bench` also shows in its help.
const (
	DefaultSamples    = 20
	DefaultDensityMax = 300
	DefaultMemoryMB   = 64
	// DefaultMicroVMMemoryMB is the lifecycle sandbox's memory on the
	// microvm runtime: the guest's kernel and agent live in it too.
	DefaultMicroVMMemoryMB  = 128
	DefaultThroughputWindow = 10 * time.Second
	DefaultAttachMiB        = 256
	// smallSandboxMB is the memory limit of the throughput and density
	// sandboxes: the "small sandbox", so the node's capacity, not
	// the request, bounds how many fit.
	smallSandboxMB = 64
)

// DefaultConcurrency are the throughput levels of a default run.
var DefaultConcurrency = []int{1, 8, 32}

// DefaultFillMiB is how much data a lifecycle sandbox with memoryMB of
// memory writes to its tmpfs: an eighth of its limit. The rest is needed:
// an idle gVisor sandbox already accounts for about 26 MiB (sentry, gofer,
// agent), and a checkpoint (suspend, snapshot, branch) grows the sentry's
// heap by some 25 MiB, charged to the sandbox's own cgroup. Measured on a
// 64 MiB sandbox: with 8 MiB of data (~40 MiB accounted) every operation
// passed 20 times; with 16 MiB (~47 MiB) a snapshot after a few suspends got
// the sentry OOM-killed by its memory cgroup, and a sandbox filled to its
// limit stalls. For a sandbox that really holds 64 MiB of data use
// --memory-mb 128 --fill-mib 64 (~94 MiB accounted).
func DefaultFillMiB(memoryMB int) int {
	return memoryMB / 8
}

// DefaultMicroVMFillMiB is the same on the microvm runtime: a sixteenth.
// A guest's own kernel keeps some 48 MiB of its memory and the agent uses
// some 20, so a 128 MiB guest has about 20 MiB left, and 16 MiB of data
// got dd OOM-killed inside it.
func DefaultMicroVMFillMiB(memoryMB int) int {
	return memoryMB / 16
}

func (c Config) withDefaults() Config {
	if c.Samples <= 0 {
		c.Samples = DefaultSamples
	}
	if c.DensityMax <= 0 {
		c.DensityMax = DefaultDensityMax
	}
	if c.Runtime == "" {
		c.Runtime = runtimeGVisor
	}
	if c.MemoryMB <= 0 {
		c.MemoryMB = DefaultMemoryMB
		if c.Runtime == runtimeMicroVM {
			c.MemoryMB = DefaultMicroVMMemoryMB
		}
	}
	if c.FillMiB < 0 {
		c.FillMiB = DefaultFillMiB(c.MemoryMB)
		if c.Runtime == runtimeMicroVM {
			c.FillMiB = DefaultMicroVMFillMiB(c.MemoryMB)
		}
	}
	if c.ThroughputWindow <= 0 {
		c.ThroughputWindow = DefaultThroughputWindow
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ChurnCycles <= 0 {
		c.ChurnCycles = DefaultChurnCycles
	}
	if c.ChurnQuietWait <= 0 {
		c.ChurnQuietWait = DefaultChurnQuietWait
	}
	if c.AttachMiB <= 0 {
		c.AttachMiB = DefaultAttachMiB
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Skip == nil {
		c.Skip = map[string]bool{}
	}
	return c
}

// absentError marks a figure that cannot be taken in this setup (no pool
// API, not root, no pre-booted image): a note, not a failure.
type absentError struct{ reason string }

func (e *absentError) Error() string { return e.reason }

func absent(format string, args ...any) error {
	return &absentError{reason: fmt.Sprintf(format, args...)}
}

// runner holds the state of one Run.
type runner struct {
	cfg      Config
	api      *client.Client
	res      *Result
	progress *progress
	tracked  *tracker
	// runID tags every sandbox of this run (metadata benchMetadataKey), so
	// that leftovers of a killed run can be found and cleanup can catch
	// branches whose create answer was lost.
	runID  string
	pool   poolControl
	failed []string
	// isolation is what the run's sandboxes report ("microvm-tcg"...),
	// from the first one that runs.
	isolation string
	// clock is how the run's sandboxes time the floors, once found.
	clock *insideClock
	// kernel reads the kernel's threads for churn.
	kernel kernelWatch
}

// step is one part of a run: the keys it fills and how.
type step struct {
	keys []string
	run  func(ctx context.Context) error
}

// Run measures the server cfg.Client talks to and returns what it found.
// Measurements that fail are null in the result with the error in Notes,
// and Run then also returns an error naming them; the result is still
// complete otherwise. Every sandbox and snapshot Run creates is deleted
// before it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if cfg.Client == nil {
		return nil, errors.New("bench: no client configured")
	}
	r := &runner{
		cfg:      cfg,
		api:      cfg.Client,
		res:      &Result{StartedAt: time.Now().UTC().Truncate(time.Second), Samples: cfg.Samples, Notes: map[string]string{}},
		progress: newProgress(cfg.Progress),
		tracked:  newTracker(),
		runID:    randomHex(6),
		pool:     poolControl{api: cfg.Client, template: cfg.Template},
		kernel:   procKernelWatch(),
	}
	if cfg.Runtime != runtimeGVisor {
		r.res.Runtime = cfg.Runtime
	}
	defer r.cleanup(ctx)
	if err := r.describe(ctx); err != nil {
		return nil, err
	}
	for _, s := range r.steps() {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench interrupted: %w", err)
		}
		if r.skipped(s.keys) {
			for _, k := range s.keys {
				r.res.note(k, "skipped")
			}
			continue
		}
		if err := s.run(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench interrupted: %w", ctx.Err())
			}
			r.record(s.keys, err)
		}
	}
	r.res.computeRatios()
	if len(r.failed) > 0 {
		return r.res, fmt.Errorf("bench: %d measurements failed: %s (see notes)", len(r.failed), strings.Join(r.failed, ", "))
	}
	return r.res, nil
}

// steps lists the measurements in the order they run: the light ones
// first, density last because it fills the node.
func (r *runner) steps() []step {
	one := func(key string, measure func(context.Context) (*Summary, error)) step {
		return step{keys: []string{key}, run: func(ctx context.Context) error {
			s, err := measure(ctx)
			if err != nil {
				return err
			}
			r.res.setLatency(key, s)
			return nil
		}}
	}
	steps := []step{
		one(KeyCreateUnpooled, r.measureCreateUnpooled),
		{keys: []string{KeyCreatePooled, KeyFloorCreatePooled}, run: r.measureCreatePooled},
		one(KeyCreateFirstExec, r.measureCreateFirstExec),
		{keys: []string{KeyExecRTT, KeyFloorExecRTT}, run: r.measureExecRTT},
		{keys: []string{KeyFileStat, KeyFileRead4KiB}, run: r.measureFileCalls},
		{keys: []string{KeyFile1MiB, KeyFloorFile1MiB}, run: r.measureFile1MiB},
		{keys: []string{KeyAttachStream, KeyFloorAttachStream}, run: r.measureAttachStream},
		{keys: lifecycleKeys, run: r.measureLifecycle},
	}
	if r.cfg.Runtime == runtimeMicroVM {
		// Not throughput or density yet: dozens of guests under TCG
		// would take the run's hour.
		return append(steps,
			one(KeyBaselineQEMUKernel, r.measureQEMUKernel),
			one(KeyBaselineQEMUBoot, r.measureQEMUBoot))
	}
	return append(steps,
		step{keys: []string{KeyThroughput}, run: r.measureThroughput},
		step{keys: []string{KeyChurn}, run: r.measureChurn},
		one(KeyBaselineRunscRun, r.measureRunscRun),
		one(KeyBaselineRunscRestore, r.measureRunscRestore),
		step{keys: []string{KeyDensity}, run: r.measureDensity})
}

func (r *runner) skipped(keys []string) bool {
	for _, k := range keys {
		if !r.cfg.Skip[k] {
			return false
		}
	}
	return true
}

// wants reports whether key is to be measured, noting it skipped if not:
// for the keys of a step that runs because another of its keys is not
// skipped.
func (r *runner) wants(key string) bool {
	if r.cfg.Skip[key] {
		r.res.note(key, "skipped")
		return false
	}
	return true
}

// takeFloor measures the floor key of a figure already taken. A floor
// that fails is noted under its own key and leaves the figure standing;
// only an interruption is returned.
func (r *runner) takeFloor(ctx context.Context, key string, measure func() (*Summary, error)) error {
	if !r.wants(key) {
		return nil
	}
	s, err := measure()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.record([]string{key}, err)
		return nil
	}
	r.res.setLatency(key, s)
	return nil
}

// record notes why the measurements of keys have no figure.
func (r *runner) record(keys []string, err error) {
	var a *absentError
	isAbsent := errors.As(err, &a)
	for _, k := range keys {
		if r.cfg.Skip[k] {
			continue
		}
		if isAbsent {
			r.res.note(k, "absent: "+a.reason)
			continue
		}
		r.res.note(k, "failed: "+err.Error())
		r.failed = append(r.failed, k)
	}
	if isAbsent {
		r.progress.printf("%s: absent: %s", strings.Join(keys, ", "), a.reason)
	} else {
		r.progress.printf("%s: FAILED: %v", strings.Join(keys, ", "), err)
	}
}

// describe fills in what the result is about: template, server and host.
func (r *runner) describe(ctx context.Context) error {
	tpl, err := r.api.GetTemplateLogsFrom(ctx, r.cfg.Template, skipLogs)
	if err != nil {
		return fmt.Errorf("template %s: %w", r.cfg.Template, err)
	}
	if tpl.State != apiv1.TemplateReady {
		return fmt.Errorf("template %s is %s, not ready", r.cfg.Template, tpl.State)
	}
	r.res.Template = TemplateInfo{Name: tpl.Name, ID: tpl.ID, DefaultRuntime: tpl.DefaultRuntime}
	if r.cfg.Runtime != runtimeGVisor && !slices.Contains(tpl.Runtimes, r.cfg.Runtime) {
		return fmt.Errorf("template %s has no %s runtime (it has %s): build one with runtime: [%s] in its recipe",
			r.cfg.Template, r.cfg.Runtime, strings.Join(tpl.Runtimes, ", "), r.cfg.Runtime)
	}
	r.res.Template.PoolAPI = tpl.Pool != nil
	r.res.Template.BootedImage = fileExists(r.bootedImageDir())
	r.res.Server = describeHost(r.api.BaseURL(), r.cfg.RunscPath)
	return nil
}
