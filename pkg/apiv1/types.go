// Package apiv1 holds the wire types of the space HTTP API v1: the JSON
// bodies the server sends and accepts. The server (internal/api) and the Go
// client (pkg/client) share them so the two cannot drift apart.
package apiv1

import "time"

// Error is the body of every non-2xx response.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Sandbox states. The lifecycle issue adds pausing/paused/suspending/...;
// clients must treat unknown states as opaque strings.
const (
	StateStarting     = "starting"
	StateRunning      = "running"
	StatePausing      = "pausing"
	StatePaused       = "paused"
	StateSuspending   = "suspending"
	StateSuspended    = "suspended"
	StateResuming     = "resuming"
	StateSnapshotting = "snapshotting"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateFailed       = "failed"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template string            `json:"template"`
	VCPUs    int               `json:"vcpus,omitempty"`
	MemoryMB int               `json:"memory_mb,omitempty"`
	DiskMB   int               `json:"disk_mb,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// TimeoutS is the lifetime in seconds from now; 0 means the server
	// default (300). It is extended by POST /v1/sandboxes/{id}/timeout.
	TimeoutS int `json:"timeout_s,omitempty"`
	// OnTimeout is what happens when the timeout passes: "kill" (default)
	// or "suspend".
	OnTimeout string `json:"on_timeout,omitempty"`
	// AutoResume resumes a suspended sandbox on any call addressed to it
	// (default true).
	AutoResume *bool `json:"auto_resume,omitempty"`
	// IdleSuspendS suspends a sandbox after this long without activity
	// (default 21600, 6 h; -1 disables).
	IdleSuspendS int `json:"idle_suspend_s,omitempty"`
	// KeepMemory false makes the timeout and idle suspends keep only the
	// disk: the resume after them boots the sandbox afresh (default true).
	KeepMemory *bool `json:"keep_memory,omitempty"`
	// SnapshotIntervalS takes a rolling snapshot this often (0: never);
	// SnapshotRetentionS is how long they are kept (default 7 days).
	SnapshotIntervalS  int `json:"snapshot_interval_s,omitempty"`
	SnapshotRetentionS int `json:"snapshot_retention_s,omitempty"`
	// Snapshot starts the sandbox from a snapshot ("<sandbox>/<name>" or a
	// snapshot id) instead of a template.
	Snapshot string `json:"snapshot,omitempty"`
	// Runtime is the sandbox backend, "gvisor" or "microvm": one the
	// template was built for (its default when empty). A sandbox started
	// from a snapshot runs on the snapshot's.
	Runtime string `json:"runtime,omitempty"`
	// Network is the sandbox's egress policy; nil means the internet is
	// allowed and private ranges are not.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Credentials are the sandbox's credential rules (at most 32); see
	// CredentialRule. Only admin keys may set them.
	Credentials []CredentialRule `json:"credentials,omitempty"`
	// VolumeMounts mount persistent volumes into the sandbox (at most 16).
	// Not with Snapshot: a sandbox started from a snapshot mounts what its
	// snapshot's sandbox mounted.
	VolumeMounts []VolumeMount `json:"volume_mounts,omitempty"`
}

// SuspendRequest is the optional body of POST /v1/sandboxes/{id}/suspend.
type SuspendRequest struct {
	// KeepMemory false keeps only the disk: the runtime stops without a
	// memory image, and the resume boots the sandbox afresh (new boot,
	// the template's start command runs again, files intact, processes
	// and sessions gone). Default true.
	KeepMemory *bool `json:"keep_memory,omitempty"`
}

// Lifecycle is a sandbox's lifetime settings.
type Lifecycle struct {
	AutoResume   bool   `json:"auto_resume"`
	OnTimeout    string `json:"on_timeout"`
	IdleSuspendS int    `json:"idle_suspend_s"`
	// KeepMemory is false when the timeout and idle suspends drop memory;
	// absent (nil) is true.
	KeepMemory         *bool `json:"keep_memory,omitempty"`
	SnapshotIntervalS  int   `json:"snapshot_interval_s,omitempty"`
	SnapshotRetentionS int   `json:"snapshot_retention_s,omitempty"`
}

// Sandbox is the public view of one sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Project is the project (tenant) the sandbox belongs to.
	Project     string            `json:"project"`
	Template    string            `json:"template"`
	TemplateID  string            `json:"template_id,omitempty"`
	State       string            `json:"state"`
	Reason      string            `json:"reason,omitempty"`
	VCPUs       int               `json:"vcpus"`
	MemoryMB    int               `json:"memory_mb"`
	DiskMB      int               `json:"disk_mb"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	ExpiresAt   time.Time         `json:"expires_at"`
	AccessToken string            `json:"access_token,omitempty"`
	Lifecycle   Lifecycle         `json:"lifecycle"`
	SuspendedAt *time.Time        `json:"suspended_at,omitempty"`
	// DiskOnly is set while the sandbox is suspended without its memory:
	// the resume boots it afresh on its disk.
	DiskOnly bool `json:"disk_only,omitempty"`
	// BranchOf is the sandbox this one was branched from; Snapshot the
	// snapshot it was started from.
	BranchOf string `json:"branch_of,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Recovered is set when the host lost the sandbox's memory and it was
	// brought back from its last durable state.
	Recovered string `json:"recovered,omitempty"`
	// Network is the sandbox's egress policy in effect.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Credentials are the sandbox's credential rules (secret names, never
	// values).
	Credentials []CredentialRule `json:"credentials,omitempty"`
	// TrafficAccessToken must accompany requests to the sandbox's exposed
	// ports (header E2b-Traffic-Access-Token) when it was created with
	// network.allow_public_traffic false.
	TrafficAccessToken string `json:"traffic_access_token,omitempty"`
	// VolumeMounts are the persistent volumes it mounts (Volume is the
	// volume's id).
	VolumeMounts []VolumeMount `json:"volume_mounts,omitempty"`
	// Node is the node the sandbox runs on; NodeState is "ready" while
	// the node answers, "unreachable" or "lost" when it does not (the
	// sandbox's operations then answer 503).
	Node      string `json:"node,omitempty"`
	NodeState string `json:"node_state,omitempty"`
	// Runtime is the backend the sandbox runs on ("gvisor", "microvm"),
	// kept through snapshots, branches, suspends and restores; Isolation is
	// what that backend really isolates it with, as the backend reports it:
	// "gvisor", "microvm-kvm" or "microvm-tcg" (emulation).
	Runtime   string `json:"runtime"`
	Isolation string `json:"isolation"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout.
type SetTimeoutRequest struct {
	TimeoutS int `json:"timeout_s"`
}

// CreateSessionRequest is the body of POST /v1/sandboxes/{id}/sessions.
type CreateSessionRequest struct {
	Cmd  []string          `json:"cmd"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	User string            `json:"user,omitempty"`
	TTY  bool              `json:"tty,omitempty"`
	// Stdin keeps the process's stdin open for POST .../stdin.
	Stdin bool   `json:"stdin,omitempty"`
	Cols  uint32 `json:"cols,omitempty"`
	Rows  uint32 `json:"rows,omitempty"`
	// Tag names the session so it can be found again (optional).
	Tag string `json:"tag,omitempty"`
}

// Session states.
const (
	SessionRunning = "running"
	SessionExited  = "exited"
)

// Session describes one command session.
type Session struct {
	ID        string     `json:"id"`
	PID       uint32     `json:"pid"`
	Cmd       []string   `json:"cmd"`
	Tag       string     `json:"tag,omitempty"`
	TTY       bool       `json:"tty"`
	State     string     `json:"state"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	Error     string     `json:"error,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// OutputBytes is the offset one past the last byte of output recorded.
	OutputBytes int64 `json:"output_bytes"`
	// DroppedBytes counts output bytes dropped from the front of the journal.
	DroppedBytes int64 `json:"dropped_bytes"`
}

// SessionList is the body of GET /v1/sandboxes/{id}/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
	// NextCursor, when set, is the cursor query parameter of the next
	// page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Attach stream (GET .../sessions/{sid}/attach) is text/event-stream with
// these event names. Every event's id: is the output offset after it.
const (
	EventStdout    = "stdout"
	EventStderr    = "stderr"
	EventPTY       = "pty" // TTY sessions: merged terminal output
	EventExit      = "exit"
	EventTruncated = "truncated"
)

// OutputChunk is the data of a stdout/stderr/pty event. Exactly one of Text
// (valid UTF-8) or Base64 is set.
type OutputChunk struct {
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64,omitempty"`
}

// ExitEvent is the data of an exit event.
type ExitEvent struct {
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// TruncatedEvent is sent when the client asked for output that was dropped
// because the journal is bounded; From is the first offset still held.
type TruncatedEvent struct {
	Requested int64 `json:"requested"`
	From      int64 `json:"from"`
}

// SignalRequest is the body of POST .../sessions/{sid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // "SIGTERM", "TERM", "9", ...
}

// ResizeRequest is the body of POST .../sessions/{sid}/resize.
type ResizeRequest struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Cmd      []string          `json:"cmd"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	User     string            `json:"user,omitempty"`
	TimeoutS int               `json:"timeout_s,omitempty"`
}

// ExecResult is the response of POST /v1/sandboxes/{id}/exec.
type ExecResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	// OutputTruncated says stdout or stderr went past the server's bound
	// (1 MiB each) and only its beginning is here; use a session to
	// stream output of any size.
	OutputTruncated bool `json:"output_truncated,omitempty"`
}

// FileEntry is one entry of a directory listing (GET .../files on a dir).
type FileEntry struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // file | dir | symlink
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
	// Metadata is the file's user-defined metadata (E2B's file metadata,
	// kept as user.e2b.* extended attributes); absent when it has none.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// FileList is the JSON body returned for a directory: one page of at most
// limit entries, in pre-order with each directory's children sorted by
// name. NextCursor, when set, is the cursor query parameter that returns
// the following page.
type FileList struct {
	Path       string      `json:"path"`
	Entries    []FileEntry `json:"entries"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// MkdirRequest is the body of POST .../files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
}

// MoveRequest is the body of POST .../files/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Template build states.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// Template describes a built (or building) template.
type Template struct {
	Name string `json:"name"`
	// Project is the project that built the template; empty for a
	// built-in template, which every project may use (Builtin).
	Project   string     `json:"project,omitempty"`
	Builtin   bool       `json:"builtin,omitempty"`
	ID        string     `json:"id"` // content hash of the resolved recipe
	State     string     `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	From      string     `json:"from"`
	SizeBytes int64      `json:"size_bytes,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	// Logs is the build log so far (GET /v1/templates/{name}); ?logs_from=N
	// returns lines from index N.
	Logs []string `json:"logs,omitempty"`
	// Sandboxes counts sandboxes using this template.
	Sandboxes int `json:"sandboxes"`
	// Pool is the template's warm pool: sandboxes kept restored and idle
	// so that a create only has to give one its identity. They run on
	// the template's default runtime.
	Pool *PoolStatus `json:"pool,omitempty"`
	// Runtimes are the sandbox backends the template was built for
	// ("gvisor", "microvm"; recipe field runtime); DefaultRuntime, the
	// first, is what a create that names none runs on.
	Runtimes       []string `json:"runtimes"`
	DefaultRuntime string   `json:"default_runtime"`
}

// SetRuntimes fills a template object's runtimes from the backends it
// was built for, its default first (none: gvisor, the only one before the
// choice).
func (t *Template) SetRuntimes(names []string) {
	if len(names) == 0 {
		names = []string{"gvisor"}
	}
	t.Runtimes = append([]string(nil), names...)
	t.DefaultRuntime = names[0]
}

// PoolStatus describes a template's warm pool.
type PoolStatus struct {
	Size  int `json:"size"`
	Ready int `json:"ready"`
}

// SetPoolRequest is the body of PUT /v1/templates/{name}/pool.
type SetPoolRequest struct {
	Size int `json:"size"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// CreateTemplateRequest is the body of POST /v1/templates: a recipe, either
// as JSON fields or as the raw YAML text in Recipe.
type CreateTemplateRequest struct {
	Name   string `json:"name,omitempty"`
	Recipe string `json:"recipe"`
}

// APIKey describes one API key; Key is only set when it is created.
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	Admin     bool      `json:"admin"`
	Project   string    `json:"project"`
	CreatedAt time.Time `json:"created_at"`
	Key       string    `json:"key,omitempty"`
}

// CreateKeyRequest is the body of POST /v1/keys. A key without a project
// belongs to project "default"; Admin keys see every project.
type CreateKeyRequest struct {
	Name    string `json:"name"`
	Project string `json:"project,omitempty"`
	Admin   bool   `json:"admin,omitempty"`
}

// Quota is a project's limits (0: unlimited); see docs/api.md, Projects.
type Quota struct {
	MaxSandboxes     int     `json:"max_sandboxes"`
	MaxMemoryMB      int     `json:"max_memory_mb"`
	MaxSnapshots     int     `json:"max_snapshots"`
	CreatesPerSecond float64 `json:"creates_per_second"`
	// MaxVolumeMB bounds the sum of size_mb of the project's volumes.
	MaxVolumeMB int `json:"max_volume_mb"`
	// MaxTemplateDiskMB bounds the sum of the sizes of the project's
	// built templates.
	MaxTemplateDiskMB int `json:"max_template_disk_mb"`
}

// QuotaSettings is the body of PUT /v1/projects/{name}: a field left out
// (or null) takes the server's default.
type QuotaSettings struct {
	MaxSandboxes     *int     `json:"max_sandboxes,omitempty"`
	MaxMemoryMB      *int     `json:"max_memory_mb,omitempty"`
	MaxSnapshots     *int     `json:"max_snapshots,omitempty"`
	CreatesPerSecond *float64 `json:"creates_per_second,omitempty"`
	MaxVolumeMB      *int     `json:"max_volume_mb,omitempty"`
	// MaxTemplateDiskMB: see Quota.
	MaxTemplateDiskMB *int `json:"max_template_disk_mb,omitempty"`
}

// ProjectUsage is what a project holds now.
type ProjectUsage struct {
	Sandboxes int `json:"sandboxes"`
	MemoryMB  int `json:"memory_mb"`
	Snapshots int `json:"snapshots"`
	Keys      int `json:"keys"`
	// VolumeMB is the sum of size_mb of the project's volumes.
	VolumeMB int `json:"volume_mb"`
	// TemplateDiskMB is the sum of the sizes of the project's built
	// templates (MiB, rounded down).
	TemplateDiskMB int `json:"template_disk_mb"`
}

// Project describes a project (tenant): its effective quota, its own
// settings and its usage.
type Project struct {
	Name     string        `json:"name"`
	Quota    Quota         `json:"quota"`
	Settings QuotaSettings `json:"settings"`
	Usage    ProjectUsage  `json:"usage"`
}

// ProjectList is the body of GET /v1/projects.
type ProjectList struct {
	Projects []Project `json:"projects"`
}

// KeyList is the body of GET /v1/keys.
type KeyList struct {
	Keys []APIKey `json:"keys"`
}

// MetricSample is one sample of a sandbox's resource use, measured inside
// the sandbox and stamped with its node's clock.
type MetricSample struct {
	Time       time.Time `json:"time"`
	CPUCount   int       `json:"cpu_count"`
	CPUUsedPct float64   `json:"cpu_used_pct"`
	MemUsed    uint64    `json:"mem_used"`
	MemTotal   uint64    `json:"mem_total"`
	MemCache   uint64    `json:"mem_cache"`
	DiskUsed   uint64    `json:"disk_used"`
	DiskTotal  uint64    `json:"disk_total"`
}

// MetricsList is GET /v1/sandboxes/{id}/metrics: the samples within the
// range asked for, oldest first, and how the history is kept.
type MetricsList struct {
	Metrics    []MetricSample `json:"metrics"`
	IntervalS  int            `json:"interval_s"`
	RetentionS int            `json:"retention_s"`
}
