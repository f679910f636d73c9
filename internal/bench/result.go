package bench

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Keys of the measurements, as they appear in the JSON result and in
// --skip.
const (
	KeyCreatePooled         = "create_pooled"
	KeyCreateUnpooled       = "create_unpooled"
	KeyCreateFirstExec      = "create_first_exec"
	KeyExecRTT              = "exec_rtt"
	KeyFileStat             = "file_stat"
	KeyFileRead4KiB         = "file_read_4kib"
	KeyFile1MiB             = "file_1mib"
	KeyAttachStream         = "attach_stream"
	KeyPauseResume          = "pause_resume"
	KeySuspend              = "suspend"
	KeyResumeSuspended      = "resume_suspended"
	KeySnapshot             = "snapshot"
	KeyBranch               = "branch"
	KeyBaselineRunscRun     = "baseline_runsc_run"
	KeyBaselineRunscRestore = "baseline_runsc_restore"
	KeyBaselineQEMUKernel   = "baseline_qemu_kernel"
	KeyBaselineQEMUBoot     = "baseline_qemu_boot"
	KeyThroughput           = "throughput"
	KeyDensity              = "density"
)

// Keys of the floors: the work of a figure done by the sandbox itself, or
// by the node alone, measured in the same run on the same sandbox, so that
// figure/floor says what the platform adds around it.
const (
	KeyFloorCreatePooled = "floor_create_pooled"
	KeyFloorExecRTT      = "floor_exec_rtt"
	KeyFloorFile1MiB     = "floor_file_1mib"
	KeyFloorAttachStream = "floor_attach_stream"
)

// floorOf pairs each floor with its figure: a skipped figure skips its
// floor, which is taken on the figure's sandbox or samples.
var floorOf = map[string]string{
	KeyCreatePooled: KeyFloorCreatePooled,
	KeyExecRTT:      KeyFloorExecRTT,
	KeyFile1MiB:     KeyFloorFile1MiB,
	KeyAttachStream: KeyFloorAttachStream,
}

// fileCallTargetMS is issue #15's target for an agent call that spawns
// nothing (file_stat, file_read_4kib): a p50 of at most 2 ms.
const fileCallTargetMS = 2

// Result is everything one run measured, in the shape `space bench --json`
// prints. A latency that was skipped or could not be measured is null, with
// the reason in Notes under its key.
type Result struct {
	StartedAt time.Time `json:"started_at"`
	// Runtime is the backend the sandboxes ran on when not gVisor
	// ("microvm"); a gVisor run's JSON is as it was before the choice.
	Runtime  string       `json:"runtime,omitempty"`
	Template TemplateInfo `json:"template"`
	Server   ServerInfo   `json:"server"`
	// Samples is the number of samples asked for per latency measurement.
	Samples int `json:"samples"`
	// Lifecycle describes the sandbox pause_resume, suspend,
	// resume_suspended, snapshot and branch were measured on.
	Lifecycle *LifecycleSandbox `json:"lifecycle_sandbox"`

	CreatePooled         *Summary `json:"create_pooled"`
	CreateUnpooled       *Summary `json:"create_unpooled"`
	CreateFirstExec      *Summary `json:"create_first_exec"`
	ExecRTT              *Summary `json:"exec_rtt"`
	FileStat             *Summary `json:"file_stat"`
	FileRead4KiB         *Summary `json:"file_read_4kib"`
	File1MiB             *Summary `json:"file_1mib"`
	PauseResume          *Summary `json:"pause_resume"`
	Suspend              *Summary `json:"suspend"`
	ResumeSuspended      *Summary `json:"resume_suspended"`
	Snapshot             *Summary `json:"snapshot"`
	Branch               *Summary `json:"branch"`
	BaselineRunscRun     *Summary `json:"baseline_runsc_run"`
	BaselineRunscRestore *Summary `json:"baseline_runsc_restore"`
	// The microvm runtime's floors, in place of runsc's.
	BaselineQEMUKernel *Summary `json:"baseline_qemu_kernel,omitempty"`
	BaselineQEMUBoot   *Summary `json:"baseline_qemu_boot,omitempty"`

	// Floors of the hot-path figures (see floorOf), timed where the work
	// happens: inside the sandbox, or by the control plane around the
	// node's claim. Their notes say how.
	FloorCreatePooled *Summary `json:"floor_create_pooled"`
	FloorExecRTT      *Summary `json:"floor_exec_rtt"`
	FloorFile1MiB     *Summary `json:"floor_file_1mib"`
	// AttachStream is a session's output streamed to the client, with
	// its floor inside.
	AttachStream *AttachStream `json:"attach_stream"`

	// Throughput is completed creates per second keyed by concurrency
	// ("1", "8", "32").
	Throughput map[string]float64 `json:"throughput"`
	Density    *Density           `json:"density"`
	// Churn is the kernel's cost of create → delete cycles.
	Churn *Churn `json:"churn,omitempty"`
	// Ratios divide our p50 figures by the p50 of a baseline or floor;
	// keys read "ours/baseline", e.g. "create_unpooled/baseline_runsc_restore",
	// "exec_rtt/floor_exec_rtt". attach_stream's is the floor's rate over
	// the client's: a time ratio too, above 1 when slower than the floor.
	Ratios map[string]float64 `json:"ratios"`
	// Notes explain absent figures and caveats, keyed like the figures.
	Notes map[string]string `json:"notes"`
}

// TemplateInfo names the template the sandboxes were created from.
type TemplateInfo struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// PoolAPI reports whether the server exposes warm pools for it.
	PoolAPI bool `json:"pool_api"`
	// BootedImage reports whether a pre-booted image was found on this host.
	BootedImage bool `json:"booted_image"`
	// DefaultRuntime is the template's default backend, which its warm
	// pool holds.
	DefaultRuntime string `json:"default_runtime,omitempty"`
}

// ServerInfo describes the server and the machine the benchmark ran on.
// The host figures are those of the benchmark's own machine, which is the
// server's when Local is true (the host-side figures need that).
type ServerInfo struct {
	URL       string `json:"url"`
	Local     bool   `json:"local"`
	Hostname  string `json:"hostname"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int64  `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	Cgroup    string `json:"cgroup"` // "v1", "v2" or "" when unknown
	Runsc     string `json:"runsc,omitempty"`
}

// LifecycleSandbox is the sandbox the lifecycle figures were taken on: its
// memory limit, the MiB of incompressible data written to its tmpfs, and
// the memory its cgroup accounted for afterwards (0 when not readable).
type LifecycleSandbox struct {
	MemoryMB int     `json:"memory_mb"`
	FillMiB  int     `json:"fill_mib"`
	UsedMiB  float64 `json:"used_mib"`
}

// AttachStream is how fast a session's output reaches the client through
// attach (GET .../sessions/{sid}/attach), against the same bytes piped to
// dd inside the sandbox. MB are 10^6 bytes.
type AttachStream struct {
	MiB  int `json:"mib"`
	Runs int `json:"runs"`
	// MBPerS is the median over the runs of the bytes the client received
	// per second, from the session's create to its exit event.
	MBPerS float64 `json:"mb_per_s"`
	// DroppedBytes is the output the server dropped over all runs
	// (truncated events): the client fell more than the node's session
	// journal behind the process. Those bytes are not in MBPerS.
	DroppedBytes int64 `json:"dropped_bytes"`
	// FloorMBPerS is the median rate of the same command piped into dd to
	// /dev/null inside the sandbox, timed there; null when not taken.
	FloorMBPerS *float64 `json:"floor_mb_per_s"`
}

// Density is how many idle sandboxes the node held and what each cost.
type Density struct {
	Sandboxes int `json:"sandboxes"`
	// MiBPerSandbox is the cgroup-accounted memory per sandbox (null when
	// the cgroups are not readable from here).
	MiBPerSandbox *float64 `json:"mib_per_sandbox"`
	// RSSMiBPerSandbox sums the RSS of each sandbox's host processes; it
	// counts shared pages (the runsc binary, application memory that
	// systrap's stubs map too) once per process, so it overstates.
	RSSMiBPerSandbox *float64 `json:"rss_mib_per_sandbox"`
	// PSSMiBPerSandbox splits shared pages between their users, so it adds
	// up to what the sandboxes really cost the host together.
	PSSMiBPerSandbox *float64 `json:"pss_mib_per_sandbox"`
	// StoppedBy says why no more sandboxes were created.
	StoppedBy string `json:"stopped_by"`
}

// Latency is one latency measurement of a Result, addressed by key.
type Latency struct {
	Key     string
	Summary *Summary
}

// Latencies lists the latency measurements of the result's runtime in a
// stable, readable order: runsc's baselines for gVisor, QEMU's for microvm.
func (r *Result) Latencies() []Latency {
	var out []Latency
	for _, f := range r.latencyFields() {
		if otherRuntimes(r.Runtime)[f.key] {
			continue
		}
		out = append(out, Latency{Key: f.key, Summary: *f.field})
	}
	return out
}

// otherRuntimes are the keys that a run on runtime rt does not take.
func otherRuntimes(rt string) map[string]bool {
	if rt == runtimeMicroVM {
		return map[string]bool{KeyBaselineRunscRun: true, KeyBaselineRunscRestore: true, KeyThroughput: true, KeyDensity: true, KeyChurn: true}
	}
	return map[string]bool{KeyBaselineQEMUKernel: true, KeyBaselineQEMUBoot: true}
}

type latencyField struct {
	key   string
	field **Summary
}

func (r *Result) latencyFields() []latencyField {
	return []latencyField{
		{KeyCreatePooled, &r.CreatePooled},
		{KeyFloorCreatePooled, &r.FloorCreatePooled},
		{KeyCreateUnpooled, &r.CreateUnpooled},
		{KeyCreateFirstExec, &r.CreateFirstExec},
		{KeyExecRTT, &r.ExecRTT},
		{KeyFloorExecRTT, &r.FloorExecRTT},
		{KeyFileStat, &r.FileStat},
		{KeyFileRead4KiB, &r.FileRead4KiB},
		{KeyFile1MiB, &r.File1MiB},
		{KeyFloorFile1MiB, &r.FloorFile1MiB},
		{KeyPauseResume, &r.PauseResume},
		{KeySuspend, &r.Suspend},
		{KeyResumeSuspended, &r.ResumeSuspended},
		{KeySnapshot, &r.Snapshot},
		{KeyBranch, &r.Branch},
		{KeyBaselineRunscRun, &r.BaselineRunscRun},
		{KeyBaselineRunscRestore, &r.BaselineRunscRestore},
		{KeyBaselineQEMUKernel, &r.BaselineQEMUKernel},
		{KeyBaselineQEMUBoot, &r.BaselineQEMUBoot},
	}
}

// setLatency stores s under key; it reports false for an unknown key.
func (r *Result) setLatency(key string, s *Summary) bool {
	for _, f := range r.latencyFields() {
		if f.key == key {
			*f.field = s
			return true
		}
	}
	return false
}

func (r *Result) latency(key string) *Summary {
	for _, f := range r.latencyFields() {
		if f.key == key {
			return *f.field
		}
	}
	return nil
}

// ratioPairs are the figures compared with a baseline: a create that
// restores a pre-booted image against bare runsc restoring it, and a
// create plus first command against bare runsc booting and running one.
var ratioPairs = [][2]string{
	{KeyCreateUnpooled, KeyBaselineRunscRestore},
	{KeyCreatePooled, KeyBaselineRunscRestore},
	{KeyCreateFirstExec, KeyBaselineRunscRun},
	{KeyCreateUnpooled, KeyBaselineRunscRun},
	// microvm: a create (a restore of the template's image) and its
	// first command against a bare boot of the same guest.
	{KeyCreateUnpooled, KeyBaselineQEMUBoot},
	{KeyCreatePooled, KeyBaselineQEMUBoot},
	{KeyCreateFirstExec, KeyBaselineQEMUBoot},
	// The hot paths against their floors.
	{KeyCreatePooled, KeyFloorCreatePooled},
	{KeyExecRTT, KeyFloorExecRTT},
	{KeyFile1MiB, KeyFloorFile1MiB},
}

// computeRatios fills Ratios from the p50s of every pair measured on both
// sides.
func (r *Result) computeRatios() {
	r.Ratios = map[string]float64{}
	for _, pair := range ratioPairs {
		ours, base := r.latency(pair[0]), r.latency(pair[1])
		if ours == nil || base == nil || base.P50MS <= 0 {
			continue
		}
		r.Ratios[pair[0]+"/"+pair[1]] = ratio(ours.P50MS, base.P50MS)
	}
	if a := r.AttachStream; a != nil && a.FloorMBPerS != nil && a.MBPerS > 0 {
		r.Ratios[KeyAttachStream+"/"+KeyFloorAttachStream] = ratio(*a.FloorMBPerS, a.MBPerS)
	}
}

// ratio is ours/base to three decimals.
func ratio(ours, base float64) float64 {
	return math.Round(ours/base*1000) / 1000
}

// note records an explanation for key after the earlier ones, once.
func (r *Result) note(key, text string) {
	if r.Notes == nil {
		r.Notes = map[string]string{}
	}
	prev, ok := r.Notes[key]
	switch {
	case !ok:
		r.Notes[key] = text
	case !slices.Contains(strings.Split(prev, "; "), text):
		r.Notes[key] = prev + "; " + text
	}
}
