// Package nodeapi is the contract between the control plane and a node.
//
// A node is reached through four parts: Control (the lifecycle of its
// sandboxes, its images, volumes, template images and pools), Data (the
// traffic of one running sandbox: exec, sessions, files, the agent and its
// ports), Events (what happens on the node, as a stream) and Transfer
// (volumes and images moved between nodes as byte streams). Every request
// and answer of Control and Events is a serializable value, and Data moves
// bytes as streams, so the same interface is implemented in process
// (*node.Node, what `space serve` wires) and over RPC (internal/noderpc,
// what `space control-plane` uses to reach `space node`). One conformance
// suite (nodeapitest) runs against both.
//
// The control plane never sees a node's paths: sandboxes, volumes, images
// and template images are named by ids that the node resolves under its
// own data directory (see ValidName).
package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/pkg/apiv1"
)

// Node is one node as the control plane drives it. Transfer is part of
// it: a drain moves sandboxes between any two nodes, in process or remote.
type Node interface {
	Control
	Data
	Events
	Transfer
}

// Control drives the sandboxes of one node.
type Control interface {
	// Info describes the node: its id, capacity, use and what it holds
	// warm. Nodes report it in their heartbeats.
	Info(ctx context.Context) (Info, error)

	// Create starts a sandbox: booted cold from its template's root
	// volume, or (Warm) restored from the template's booted image, which
	// the node makes on first use.
	Create(ctx context.Context, req CreateRequest) error
	// Claim takes a ready sandbox from the template's pool, gives it
	// req.Identity and req.Network, and returns its id (pooled sandboxes
	// are named when they are made). The node completes the identity with
	// that id (env SPACE_SANDBOX_ID, info sandbox_id), which the caller
	// cannot know before. Claimed is false when the pool has none ready
	// with these limits; on an error nothing is claimed (the node released
	// the sandbox it could not give the identity).
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// BootFromDisk boots a sandbox again on the root volume it already
	// has (a sandbox whose memory image is lost).
	BootFromDisk(ctx context.Context, spec CreateSpec) error
	// Destroy stops a sandbox and deletes its root volume and network slot.
	Destroy(ctx context.Context, id string) error
	// Halt stops a sandbox's runtime and keeps its root volume.
	Halt(ctx context.Context, id string) error
	// Reconcile settles a sandbox after a crash of the control plane or
	// the node, from what the control plane's record says of it (see
	// ReconcileRequest and Reconcile for the steps): it adopts a runtime
	// that survived, undoes a restore in place the record did not commit
	// and finishes a suspend whose image is whole. It is idempotent: a
	// second call after a crash in between finds the work done.
	Reconcile(ctx context.Context, req ReconcileRequest) (ReconcileResult, error)
	// Sweep destroys every sandbox the node runs that keep does not name.
	Sweep(ctx context.Context, keep []string) error
	// Sandboxes lists the ids of the sandboxes the runtime runs.
	Sandboxes(ctx context.Context) ([]string, error)

	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Paused(ctx context.Context, id string) (bool, error)
	// Suspend checkpoints a sandbox into image and stops it.
	Suspend(ctx context.Context, id, image string) error
	// Capture checkpoints a running sandbox into image and a read-only
	// copy of its root volume into volume, and leaves it running.
	Capture(ctx context.Context, req CaptureRequest) error
	// ResumeFrom restores a sandbox from a checkpoint image.
	ResumeFrom(ctx context.Context, spec RestoreSpec) error
	// CommitRestore drops the volume a finished restore in place set aside.
	CommitRestore(ctx context.Context, id string) error
	// Rekey gives a running sandbox a new identity.
	Rekey(ctx context.Context, id string, identity Identity) error
	// SetNetwork replaces a sandbox's egress policy.
	SetNetwork(ctx context.Context, id string, policy network.Policy) error
	// Stats reads a sandbox's resource use.
	Stats(ctx context.Context, id string) (runtime.Stats, error)
	// Metrics returns the resource samples the node took of a sandbox
	// (every MetricsInterval while it runs, kept for MetricsRetention)
	// whose Time is within [start, end], oldest first. A sandbox the node
	// has no samples of has none: that is not an error.
	Metrics(ctx context.Context, id string, start, end time.Time) ([]MetricSample, error)

	// Image reports on a checkpoint image; a missing one is not
	// Complete.
	Image(ctx context.Context, image string) (ImageInfo, error)
	// Images lists the checkpoint images the node holds.
	Images(ctx context.Context) ([]string, error)
	// DeleteImage deletes a checkpoint image; a missing one is not an error.
	DeleteImage(ctx context.Context, image string) error

	// Volumes lists the volumes (and directories of volumes) directly
	// under prefix, by full name: "snapshots" gives "snapshots/<sandbox>",
	// which gives "snapshots/<sandbox>/<capture>".
	Volumes(ctx context.Context, prefix string) ([]string, error)
	VolumeExists(ctx context.Context, name string) (bool, error)
	// DeleteVolume deletes a volume; a missing one is not an error.
	DeleteVolume(ctx context.Context, name string) error
	// ReadVolumeFile opens a path of a captured (read-only) volume, such
	// as a snapshot's filesystem, so one earlier file can be recovered
	// without a restore. path is absolute, as the sandbox saw it, and is
	// resolved inside the volume: neither ".." nor a symlink leaves it.
	// It returns the path's entry and, for a regular file, its bytes; a
	// directory comes with an empty body (list it with ListVolumeDir),
	// anything else is refused. The caller closes the body. Errors are
	// *AgentError (404 missing, 400 refused) and name the path only as
	// the sandbox saw it, never as the node stores it.
	ReadVolumeFile(ctx context.Context, volume, path string) (io.ReadCloser, *filesystempb.EntryInfo, error)
	// ListVolumeDir starts one page of a listing of a directory of a
	// captured volume, resolved as ReadVolumeFile resolves paths, in
	// bounded memory whatever the directory's size. Entries are described
	// without following symlinks (a symlink is FILE_TYPE_SYMLINK) and
	// their paths are path joined below path. The caller closes it.
	ListVolumeDir(ctx context.Context, volume, path string, opts ListOptions) (DirPage, error)

	// TemplateImages lists the ids of the templates whose booted image
	// the node holds.
	TemplateImages(ctx context.Context) ([]string, error)
	// DropTemplateImage deletes a template's booted image.
	DropTemplateImage(ctx context.Context, templateID string) error

	// SetPool sets how many ready sandboxes of a template the node keeps.
	SetPool(ctx context.Context, req PoolRequest) error
	// Pool reports a template's pool on this node.
	Pool(ctx context.Context, templateID string) (PoolStatus, error)
}

// Data reaches running sandboxes.
type Data interface {
	// Sandbox returns the data plane of a sandbox the node runs, or an
	// error wrapping ErrNoSandbox. An implementation may skip the check
	// and hand back a handle whose calls fail with ErrNoSandbox instead
	// (the remote one does, to save a round trip per call).
	Sandbox(ctx context.Context, id string) (Sandbox, error)
}

// Events streams what happens on a node.
type Events interface {
	// Events delivers the node's events from now on until ctx ends or the
	// stream breaks; the channel is closed then, and the consumer
	// subscribes again.
	Events(ctx context.Context) (<-chan Event, error)
}

// Transfer moves volumes and checkpoint images between nodes as byte
// streams: templates shipped to the nodes that need them, and a drain's
// sandboxes (root volume, memory image, snapshots) moved off a node. A
// stream is produced by Send* on one node and consumed by Receive* on
// another; nothing of it is held whole in memory.
type Transfer interface {
	// SendVolume writes a volume as a stream (a btrfs send stream on
	// btrfs). A writable volume is sent as a read-only copy taken when
	// the send starts.
	SendVolume(ctx context.Context, name string, w io.Writer) error
	// ReceiveVolume makes req.Name from a stream SendVolume wrote. It
	// never replaces a volume (ErrExists) and leaves nothing behind when
	// it fails.
	ReceiveVolume(ctx context.Context, req ReceiveVolumeRequest, r io.Reader) error
	// SendImage writes a complete checkpoint image as a tar stream.
	SendImage(ctx context.Context, image string, w io.Writer) error
	// ReceiveImage makes a checkpoint image from a stream SendImage
	// wrote; the image is Complete once it returns. It never replaces an
	// image (ErrExists) and leaves nothing behind when it fails.
	ReceiveImage(ctx context.Context, image string, r io.Reader) error
}

// PersistentVolumes makes and edits a node's persistent volumes: volumes
// that outlive sandboxes, mounted into them (CreateSpec.Mounts) and read
// without one through ReadVolumeFile and ListVolumeDir. Their names are
// ValidName names the control plane picks (VolumeName). A node that keeps
// no persistent volumes does not implement it.
type PersistentVolumes interface {
	// CreateVolume makes an empty writable volume that holds at most
	// diskMB MiB (0: no limit). It never replaces one (ErrExists).
	CreateVolume(ctx context.Context, name string, diskMB int) error
	// VolumeUsage reports the bytes a persistent volume holds.
	VolumeUsage(ctx context.Context, name string) (int64, error)
	// WriteVolumeFile writes a regular file of a persistent volume from r
	// (replacing one that is there) and returns its entry. path is
	// absolute, resolved inside the volume as ReadVolumeFile resolves it;
	// Parents creates missing directories on the way.
	WriteVolumeFile(ctx context.Context, req VolumeEdit, r io.Reader) (*filesystempb.EntryInfo, error)
	// EditVolume makes a directory, removes a path (recursively) or
	// changes a path's owner and mode, and returns the entry (nil after a
	// removal). Errors are *AgentError as for ReadVolumeFile.
	EditVolume(ctx context.Context, req VolumeEdit) (*filesystempb.EntryInfo, error)
}

// Operations of EditVolume.
const (
	VolumeMkdir  = "mkdir"
	VolumeRemove = "remove"
	VolumeChattr = "chattr"
	VolumeStat   = "stat"
)

// VolumeEdit is one change to a persistent volume's files.
type VolumeEdit struct {
	Volume string `json:"volume"`
	Path   string `json:"path"`
	// Op is one of the Volume* operations (ignored by WriteVolumeFile).
	Op string `json:"op,omitempty"`
	// Parents creates missing parent directories (and makes mkdir of an
	// existing directory succeed).
	Parents bool `json:"parents,omitempty"`
	// UID, GID and Mode are set on the entry when not nil.
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
	Mode *uint32 `json:"mode,omitempty"`
}

// MaxMounts bounds the persistent volumes one sandbox mounts.
const MaxMounts = 16

// CheckMounts refuses mounts a sandbox cannot have: more than MaxMounts,
// a volume that is not a persistent one, a mount point that is not a
// clean absolute path, that is the root, that covers or lies inside what
// the sandbox's own machinery needs (/proc, /dev, /sys, the agent's
// directories), that covers a system directory (/etc, /usr, ...), or that
// two mounts share.
func CheckMounts(mounts []VolumeMount) error {
	if len(mounts) > MaxMounts {
		return fmt.Errorf("at most %d volume mounts, got %d", MaxMounts, len(mounts))
	}
	seen := map[string]bool{}
	for _, m := range mounts {
		if err := ValidName(m.Volume); err != nil || !strings.HasPrefix(m.Volume, "persistent/") {
			return fmt.Errorf("volume %q is not a persistent volume", m.Volume)
		}
		if err := CheckMountPath(m.Path); err != nil {
			return err
		}
		if seen[m.Path] {
			return fmt.Errorf("two volumes are mounted at %s", m.Path)
		}
		seen[m.Path] = true
	}
	for a := range seen {
		for b := range seen {
			if a != b && strings.HasPrefix(b, a+"/") {
				return fmt.Errorf("volume mount %s lies inside volume mount %s", b, a)
			}
		}
	}
	return nil
}

// Mount points a volume may neither cover nor lie inside, and system
// directories it may not cover (it may lie inside them: /usr/local/data).
var (
	reservedMountTrees = []string{"/proc", "/dev", "/sys", "/.space", "/run/space"}
	systemDirs         = []string{"/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/run", "/sbin", "/usr", "/var"}
)

// CheckMountPath refuses a mount point CheckMounts would.
func CheckMountPath(p string) error {
	switch {
	case p == "" || len(p) > 1024 || strings.ContainsRune(p, 0):
		return fmt.Errorf("volume mount path %.64q must be an absolute path of 1 to 1024 bytes", p)
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p:
		return fmt.Errorf("volume mount path %.64q must be a clean absolute path (no .., no trailing /)", p)
	case p == "/":
		return errors.New("a volume cannot be mounted over the sandbox's root")
	}
	for _, r := range reservedMountTrees {
		if p == r || strings.HasPrefix(p, r+"/") || strings.HasPrefix(r, p+"/") {
			return fmt.Errorf("a volume cannot be mounted at %s: it would cover %s, which the sandbox needs", p, r)
		}
	}
	for _, d := range systemDirs {
		if p == d || strings.HasPrefix(d, p+"/") {
			return fmt.Errorf("a volume cannot be mounted at %s: it would cover the system directory %s", p, d)
		}
	}
	return nil
}

// VolumeName is the node's name of the persistent volume with id.
func VolumeName(id string) string { return "persistent/" + id }

// Templates builds and deletes a node's templates, for a control plane
// that builds a template once (on one node, in a build sandbox there) and
// ships its root volume to the other nodes with Transfer. A node that has
// no template builder does not implement it.
type Templates interface {
	// BuildTemplate builds a recipe (its YAML) on the node and writes the
	// build's progress and step output to logs, line by line. It returns
	// once the template is ready (or the build failed); the built root
	// volume, Spec.RootfsVolume, is what SendVolume ships to other nodes.
	BuildTemplate(ctx context.Context, req TemplateBuildRequest, logs io.Writer) (TemplateBuilt, error)
	// StageTemplateArchive stores an uploaded archive (at most limit
	// bytes): the OCI archive of a from: upload recipe or the files of a
	// copy step, and returns the handle that build names it by
	// (TemplateBuildRequest.Archive or CopyArchives). The build consumes
	// it.
	StageTemplateArchive(ctx context.Context, r io.Reader, limit int64) (handle string, err error)
	// DiscardTemplateArchive drops a staged archive that no build will
	// consume (the control plane answered the request without a build,
	// or refused it after staging); an unknown handle is no error, a
	// malformed one wraps ErrInvalidName.
	DiscardTemplateArchive(ctx context.Context, handle string) error
	// DeleteTemplate deletes a template's root volume (and the node's own
	// record of it, if it built it); a missing one is not an error.
	DeleteTemplate(ctx context.Context, id string) error
}

// TemplateBuildRequest is one template build.
type TemplateBuildRequest struct {
	// Name names the template in the build's log; it is a template name
	// (template.ValidName), not the caller's catalog name.
	Name   string `json:"name"`
	Recipe []byte `json:"recipe"`
	// HostPaths allows a recipe to read the node's disk (admin keys).
	HostPaths bool `json:"host_paths,omitempty"`
	// Archive is the handle of the staged archive a from: upload recipe
	// builds from; empty for other recipes.
	Archive string `json:"archive,omitempty"`
	// CopyArchives maps the files hash each copy step of the recipe
	// names (E2B's uploaded files) to the handle of its staged archive
	// (StageTemplateArchive). The build consumes them.
	CopyArchives map[string]string `json:"copy_archives,omitempty"`
	// RegistryUsername and RegistryPassword authenticate the pull of a
	// from: image base; the node never stores them.
	RegistryUsername string `json:"-"`
	RegistryPassword string `json:"-"`
	// DiskQuotaBytes is what is left of the template disk quota of the
	// project the build is for; the build fails when it would write more
	// (template.Source.DiskQuotaBytes). 0: the node's build limit alone.
	DiskQuotaBytes int64 `json:"disk_quota_bytes,omitempty"`
}

// TemplateBuilt is a template a node built.
type TemplateBuilt struct {
	Spec      TemplateSpec `json:"spec"`
	SizeBytes int64        `json:"size_bytes,omitempty"`
}

// ReceiveVolumeRequest says what a received volume becomes: a template's
// root volume stays read-only; a sandbox's root volume is writable under
// its disk limit (DiskMB, 0 for none), set before the volume appears.
type ReceiveVolumeRequest struct {
	Name     string `json:"name"`
	Writable bool   `json:"writable,omitempty"`
	DiskMB   int    `json:"disk_mb,omitempty"`
}

// Sandbox is the data plane of one running sandbox. Bodies stream both
// ways; nothing holds a whole file or a whole output in memory.
type Sandbox interface {
	ID() string

	// Exec runs a command and returns what it printed (each stream bounded
	// by MaxExecOutput).
	Exec(ctx context.Context, spec ExecSpec) (*ExecResult, error)

	ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error)
	WriteFile(ctx context.Context, path, user string, body io.Reader) error
	Stat(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error)
	// List starts one page of a listing; the caller closes it.
	List(ctx context.Context, path, user string, opts ListOptions) (DirPage, error)
	Remove(ctx context.Context, path, user string) error
	MakeDir(ctx context.Context, path, user string) (*filesystempb.EntryInfo, error)
	Move(ctx context.Context, from, to, user string) (*filesystempb.EntryInfo, error)

	// StartSession starts a command whose lifetime is independent of any
	// client; its output is journaled on the node.
	StartSession(ctx context.Context, spec SessionSpec) (SessionInfo, error)
	Session(ctx context.Context, sid string) (SessionInfo, error)
	Sessions(ctx context.Context) ([]SessionInfo, error)
	// Attach delivers a session's output from offset on until the process
	// ends (returning how) or ctx ends. When offset was already dropped
	// from the journal, dropped is called first with the offset asked for
	// and the first one held; its error ends the attach.
	Attach(ctx context.Context, sid string, offset int64, dropped func(requested, first int64) error, fn func(Chunk) error) (*End, error)
	WriteStdin(ctx context.Context, sid string, data []byte) error
	CloseStdin(ctx context.Context, sid string) error
	Signal(ctx context.Context, sid string, signal int) error
	Resize(ctx context.Context, sid string, cols, rows uint32) error

	// DialPort opens a TCP connection to a port inside the sandbox.
	DialPort(ctx context.Context, port int) (net.Conn, error)
	// Agent carries HTTP requests to the sandbox's agent (envd) exactly as
	// they are: the token the client presented, unchanged. The request's
	// host is ignored.
	Agent() http.RoundTripper
}

// DirPage is one page of a directory listing, read entry by entry.
type DirPage interface {
	// Next returns the next entry, or io.EOF after the last one.
	Next() (*filesystempb.EntryInfo, error)
	// NextCursor is the cursor of the following page ("" on the last);
	// valid once Next returned io.EOF.
	NextCursor() string
	Close() error
}

// Errors a node answers with, across the wire as well.
var (
	// ErrNoSandbox: the node runs no sandbox by this id.
	ErrNoSandbox = errors.New("sandbox is not running on this node")
	// ErrNoSession: the sandbox has no session by this id.
	ErrNoSession = errors.New("session not found")
	// ErrExecTimeout: a command ran past its timeout and was killed.
	ErrExecTimeout = errors.New("command timed out")
	// ErrNoEgress: the node has no uplink for sandboxes.
	ErrNoEgress = errors.New("node has no egress configured")
	// ErrInvalidName: an image, volume or template id is not a name the
	// node accepts (see ValidName).
	ErrInvalidName = errors.New("invalid name")
	// ErrExists: a transfer would replace a volume or an image the node
	// already holds.
	ErrExists = errors.New("already exists")
	// ErrNoRuntime refuses a sandbox on a backend its template was not
	// built for, or that the node does not have.
	ErrNoRuntime = errors.New("runtime not available")
	// ErrNoCheckpoint: the sandbox's runtime cannot save its memory as
	// it runs now (a microVM with persistent volumes mounted); a suspend
	// that drops memory still can stop it.
	ErrNoCheckpoint = errors.New("its runtime cannot save its memory")
	// ErrTooManySessions refuses a session to a sandbox that keeps as
	// many as its node allows, all of them running.
	ErrTooManySessions = errors.New("too many sessions")
)

// AgentError is a failed call to a sandbox's agent, with the HTTP status
// that describes it to API clients (404 missing, 400 bad path, 507 out of
// space, 502 agent unreachable, ...).
type AgentError struct {
	Status  int
	Message string
}

func (e *AgentError) Error() string { return e.Message }

// ValidName reports whether name can name a volume or an image: slash-
// separated segments of letters, digits, '-', '_' and '.', none of them
// "." or "..", at most 255 bytes. A node resolves a name only under its
// own directories, so a valid name never escapes them.
func ValidName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q", ErrInvalidName, name)
		}
		for _, c := range seg {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
			if !ok {
				return fmt.Errorf("%w: %q", ErrInvalidName, name)
			}
		}
	}
	return nil
}

// TemplateSpec is what the node needs to know of a template.
type TemplateSpec struct {
	ID           string            `json:"id"`
	RootfsVolume string            `json:"rootfs_volume"`
	Env          map[string]string `json:"env,omitempty"`
	User         string            `json:"user,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	// Start is a long-running command started in every new sandbox and
	// Ready a check that must exit 0 before the sandbox counts as running.
	Start string `json:"start,omitempty"`
	Ready string `json:"ready,omitempty"`
	// MCPGateway is the template's MCP gateway command (the recipe's
	// mcp.gateway), which E2B's SDKs run as `mcp-gateway --config ...`
	// when a sandbox is created with the mcp option; "" when it has none.
	MCPGateway string `json:"mcp_gateway,omitempty"`
	// Runtimes are the backends the template was built for (runtime.GVisor,
	// runtime.MicroVM), its default first; empty: gVisor only, as every
	// template before the choice was.
	Runtimes []string `json:"runtimes,omitempty"`
}

// DefaultRuntime is the backend a sandbox of the template runs on when its
// create names none.
func (t TemplateSpec) DefaultRuntime() string { return t.RuntimeNames()[0] }

// RuntimeName is the backend the spec's sandbox runs on.
func (s CreateSpec) RuntimeName() string {
	if s.Runtime != "" {
		return s.Runtime
	}
	return s.Template.DefaultRuntime()
}

// HasRuntime reports whether the template was built for backend name.
func (t TemplateSpec) HasRuntime(name string) bool { return slices.Contains(t.RuntimeNames(), name) }

// CheckRuntime refuses a backend the template was not built for, naming
// those it was.
func (t TemplateSpec) CheckRuntime(name string) error {
	if t.HasRuntime(name) {
		return nil
	}
	return fmt.Errorf("%w: template %s has no %s runtime (it has %s)", ErrNoRuntime, t.ID, name, strings.Join(t.RuntimeNames(), ", "))
}

// RuntimeNames are the backends the template was built for, its default
// first.
func (t TemplateSpec) RuntimeNames() []string {
	if len(t.Runtimes) == 0 {
		return []string{runtime.GVisor}
	}
	return slices.Clone(t.Runtimes)
}

// ArtifactVolume is the read-only volume beside a template's rootfs
// volume that holds backend name's artifact of it (runtime.ImageBuilder):
// the one place that names it, for the builder and the node.
func ArtifactVolume(rootfsVolume, name string) string { return rootfsVolume + "." + name }

// ArtifactVolume is the template's artifact volume of backend name.
func (t TemplateSpec) ArtifactVolume(name string) string {
	return ArtifactVolume(t.RootfsVolume, name)
}

// CreateSpec is one sandbox to start.
type CreateSpec struct {
	ID          string            `json:"id"`
	Template    TemplateSpec      `json:"template"`
	Limits      runtime.Limits    `json:"limits"`
	DiskMB      int               `json:"disk_mb"`
	Env         map[string]string `json:"env,omitempty"`
	AccessToken string            `json:"access_token"`
	// Network is the sandbox's egress policy.
	Network network.Policy `json:"network"`
	// Mounts are the persistent volumes the sandbox mounts.
	Mounts []VolumeMount `json:"mounts,omitempty"`
	// Runtime is the backend the sandbox runs on, one the template has;
	// empty: the template's default.
	Runtime string `json:"runtime,omitempty"`
}

// VolumeMount is a persistent volume (a volume the node made with
// CreateVolume) bind-mounted into a sandbox at Path. The mount is live:
// every sandbox mounting the volume sees the others' writes.
type VolumeMount struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// CreateRequest is a create: cold, or (Warm) from the template's booted
// image, with Identity given to the restored copy.
type CreateRequest struct {
	Spec     CreateSpec `json:"spec"`
	Warm     bool       `json:"warm,omitempty"`
	Identity Identity   `json:"identity"`
}

// ClaimRequest takes a pooled sandbox of a template.
type ClaimRequest struct {
	TemplateID string     `json:"template_id"`
	Limits     PoolLimits `json:"limits"`
	Identity   Identity   `json:"identity"`
	// Network is the policy the claimed sandbox runs under from now on.
	Network network.Policy `json:"network"`
}

// ClaimResult says whether a pooled sandbox was taken.
type ClaimResult struct {
	Claimed bool   `json:"claimed"`
	ID      string `json:"id,omitempty"`
}

// Identity is what makes a restored copy a sandbox of its own.
type Identity struct {
	AccessToken string            `json:"access_token"`
	Env         map[string]string `json:"env,omitempty"`
	// Info is written to /run/space/identity.json inside the sandbox, so
	// processes that were restored can tell (and watch) who they are now.
	Info map[string]string `json:"info,omitempty"`
}

// CaptureRequest checkpoints a running sandbox without stopping it.
type CaptureRequest struct {
	ID     string `json:"id"`
	Volume string `json:"volume"`
	Image  string `json:"image"`
}

// RestoreSpec describes a sandbox to bring back from a checkpoint image.
type RestoreSpec struct {
	ID    string `json:"id"`
	Image string `json:"image"`
	// FromVolume, when set, replaces the sandbox's root volume with a
	// writable snapshot of this (captured) volume first.
	FromVolume string         `json:"from_volume,omitempty"`
	Limits     runtime.Limits `json:"limits"`
	DiskMB     int            `json:"disk_mb"`
	// AccessToken is the token the agent in the image holds.
	AccessToken string `json:"access_token"`
	// NewIdentity re-keys the restored agent: a branch, or a new sandbox
	// started from a snapshot. Nil keeps the identity (resume, rollback).
	NewIdentity *Identity `json:"new_identity,omitempty"`
	// Network is the sandbox's egress policy.
	Network network.Policy `json:"network"`
	// Rollback drops the sessions the node follows: the restored image
	// holds other processes (a restore in place to an earlier snapshot).
	Rollback bool `json:"rollback,omitempty"`
	// Mounts are the persistent volumes the restored sandbox mounts: those
	// the checkpointed one mounted, at the same paths.
	Mounts []VolumeMount `json:"mounts,omitempty"`
	// Runtime, when set, is the backend the caller expects the image to be
	// of: an image is only ever restored by the backend that took it, and
	// a restore naming another is refused.
	Runtime string `json:"runtime,omitempty"`
}

// How the nodes sample their sandboxes' resource use: one sample per
// running sandbox every MetricsInterval, the last MetricsRetention of them
// kept in the node's memory (720 samples a sandbox at most).
const (
	MetricsInterval  = 5 * time.Second
	MetricsRetention = time.Hour
)

// MetricSample is one sample of a sandbox's resource use, as its agent
// measured it (envd's metrics) at Time, the node's clock. It is the API's
// sample: the node's answer is served as it is.
type MetricSample = apiv1.MetricSample

// ImageInfo describes a checkpoint image.
type ImageInfo struct {
	Complete  bool  `json:"complete"`
	SizeBytes int64 `json:"size_bytes"`
}

// PoolLimits are the limits pooled sandboxes run with; only a request that
// asks for exactly these can take one.
type PoolLimits struct {
	Limits runtime.Limits `json:"limits"`
	DiskMB int            `json:"disk_mb"`
}

// PoolRequest sets a template's pool on a node.
type PoolRequest struct {
	Template TemplateSpec `json:"template"`
	Limits   PoolLimits   `json:"limits"`
	// Waiting is the policy pooled sandboxes wait under.
	Waiting network.Policy `json:"waiting"`
	Size    int            `json:"size"`
}

// PoolStatus is what a pool holds.
type PoolStatus struct {
	Size  int `json:"size"`
	Ready int `json:"ready"`
}

// Info describes a node: what it offers, what it uses, what it holds warm.
type Info struct {
	ID string `json:"id"`
	// Capacity.
	VCPUs    int `json:"vcpus"`
	MemoryMB int `json:"memory_mb"`
	DiskMB   int `json:"disk_mb"`
	// Use.
	Sandboxes    int `json:"sandboxes"`
	DiskFreeMB   int `json:"disk_free_mb"`
	MemoryFreeMB int `json:"memory_free_mb"`
	// VCPUsCommitted and MemoryCommittedMB are the sums of the limits of
	// the sandboxes the node runs, pooled ones included, counted from the
	// moment the node accepts a create: placement weighs commitment, since
	// a sandbox's memory is used lazily and free memory lags behind it.
	VCPUsCommitted    int `json:"vcpus_committed"`
	MemoryCommittedMB int `json:"memory_committed_mb"`
	// Templates are the ids of the templates whose root volume the node
	// holds, so it can run their sandboxes.
	Templates []string `json:"templates,omitempty"`
	// TemplateImages are the templates booted warm on the node; Pools
	// their pools' stock by template id.
	TemplateImages []string              `json:"template_images,omitempty"`
	Pools          map[string]PoolStatus `json:"pools,omitempty"`
	// Runtimes are the node's sandbox backends, each with the isolation it
	// gives (runtime.Isolation*); empty: a node from before the choice,
	// which runs gVisor only.
	Runtimes map[string]string `json:"runtimes,omitempty"`
}

// ExecSpec is a one-shot command.
type ExecSpec struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	User    string            `json:"user,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
}

// ExecResult is what a one-shot command produced.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
	// Truncated is set when a stream produced more than MaxExecOutput
	// bytes; only the first MaxExecOutput of it were kept.
	Truncated bool
}

// MaxExecOutput bounds what a one-shot command's stdout and stderr may
// each hold in the server's memory: the sandbox chooses how much it
// prints, so without a bound one call could exhaust the node. Larger
// output belongs in a session, whose attach streams it.
const MaxExecOutput = 1 << 20

// ListOptions selects one page of a directory listing; zero values are
// the agent's defaults (depth 1, dirlist.DefaultLimit entries).
type ListOptions struct {
	Depth, Limit int
	Cursor       string // next_cursor of the previous page
}

// Bounds of what a session's spec may hold. The node keeps a session's
// command and tag for as long as it keeps the session, and every listing
// carries them, so they are bounded like any other memory a client makes
// the server hold (docs/api.md, Sessions). Env goes to the process and
// is not kept; CheckEnv bounds it.
const (
	// MaxSessionTag bounds a tag: a name to find the session by.
	MaxSessionTag = 1 << 10
	// MaxSessionArgs bounds the number of cmd's arguments.
	MaxSessionArgs = 4096
	// MaxSessionCmdBytes bounds the sum of cmd's arguments' lengths: twice
	// the longest single argument Linux's execve takes (128 KiB).
	MaxSessionCmdBytes = 256 << 10
	// MaxSessionPath bounds cwd and user.
	MaxSessionPath = 4096
)

// ErrSessionSpec is wrapped by SessionSpec.Check's refusals.
var ErrSessionSpec = errors.New("invalid session")

// Check refuses a spec past the session bounds, naming the field and the
// bound.
func (s SessionSpec) Check() error {
	if len(s.Tag) > MaxSessionTag {
		return fmt.Errorf("%w: tag is %d bytes, at most %d", ErrSessionSpec, len(s.Tag), MaxSessionTag)
	}
	if len(s.Cmd) > MaxSessionArgs {
		return fmt.Errorf("%w: cmd has %d arguments, at most %d", ErrSessionSpec, len(s.Cmd), MaxSessionArgs)
	}
	size := 0
	for _, a := range s.Cmd {
		size += len(a)
	}
	if size > MaxSessionCmdBytes {
		return fmt.Errorf("%w: cmd is %d bytes, at most %d", ErrSessionSpec, size, MaxSessionCmdBytes)
	}
	if len(s.Cwd) > MaxSessionPath || len(s.User) > MaxSessionPath {
		return fmt.Errorf("%w: cwd and user are at most %d bytes each", ErrSessionSpec, MaxSessionPath)
	}
	return nil
}

// SessionSpec is a command to start as a session.
type SessionSpec struct {
	Cmd   []string          `json:"cmd"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"`
	TTY   bool              `json:"tty,omitempty"`
	Cols  uint32            `json:"cols,omitempty"`
	Rows  uint32            `json:"rows,omitempty"`
	Stdin bool              `json:"stdin,omitempty"`
	Tag   string            `json:"tag,omitempty"`
}

// SessionInfo describes a session: its command, and how far its journal
// goes.
type SessionInfo struct {
	ID        string      `json:"id"`
	PID       uint32      `json:"pid"`
	Spec      SessionSpec `json:"spec"`
	StartedAt time.Time   `json:"started_at"`
	// EndedAt is zero while the process runs; End says how it ended.
	EndedAt time.Time `json:"ended_at"`
	End     *End      `json:"end,omitempty"`
	// OutputBytes is the journal's next offset, DroppedBytes the first
	// offset it still holds.
	OutputBytes  int64 `json:"output_bytes"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

// Stream names a session output stream.
type Stream uint8

// Output streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
	// PTY is a terminal's combined output.
	PTY Stream = 3
)

// String names the stream as the API's attach events do.
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case PTY:
		return "pty"
	}
	return "unknown"
}

// Chunk is output at an offset of a session's journal.
type Chunk struct {
	Stream Stream
	Offset int64
	Data   []byte
}

// End is how a session's process finished.
type End struct {
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// EventType names what an Event reports.
type EventType string

// Event types.
const (
	// EventActivity: a sandbox's processes produced output (idle suspend
	// counts it as activity).
	EventActivity EventType = "activity"
	// EventExit: a sandbox's runtime ended without the control plane
	// asking; Reason says why (an OOM kill says so).
	EventExit EventType = "exit"
	// EventNetworkDenied: the gateway refused a sandbox's connection or
	// name; Reason names what was refused.
	EventNetworkDenied EventType = "network_denied"
	// EventPool: a template's pool stock changed.
	EventPool EventType = "pool"
)

// Event is one thing that happened on a node.
type Event struct {
	Type    EventType `json:"type"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// TemplateID and Pool are set for EventPool.
	TemplateID string      `json:"template_id,omitempty"`
	Pool       *PoolStatus `json:"pool,omitempty"`
}
