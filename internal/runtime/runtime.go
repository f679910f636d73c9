// Package runtime is the seam between the node and its sandbox backends
// (gVisor today, a microVM next): the Runtime interface the node drives,
// what a sandbox is started from, the limits it runs under and what a
// backend reports back. Every backend passes the conformance suite in
// package runtimetest.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/space-platform/space/internal/network"
)

// ErrNotFound is returned for a sandbox the backend does not know.
var ErrNotFound = errors.New("runtime sandbox not found")

// ErrUnsupported is returned for a spec the backend cannot run, such as a
// root filesystem of a kind it does not take.
var ErrUnsupported = errors.New("not supported by this runtime backend")

// UnsupportedError is ErrUnsupported with the backend's reason, a
// sentence the node can hand to a client as it is.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return e.Reason + ": " + ErrUnsupported.Error() }
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// Runtime is a sandbox backend. It owns everything between a spec and a
// running agent: how the root filesystem, the agent and the network slot
// get into the sandbox, and how the sandbox's end is noticed.
type Runtime interface {
	// Start creates and starts a sandbox from spec, the agent as its
	// first process.
	Start(ctx context.Context, spec Spec) error
	// Restore starts a sandbox from a checkpoint image instead of booting
	// it. The spec may differ from the checkpointed sandbox's in its ID,
	// its network slot and its root filesystem (a copy of the one the
	// checkpoint was taken on); one image may be restored many times, side
	// by side.
	Restore(ctx context.Context, spec Spec, imageDir string) error
	// Checkpoint saves the sandbox's memory and process state into
	// imageDir. With leaveRunning the sandbox continues afterwards (or
	// stays frozen, if it was); otherwise a running sandbox stops.
	Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error
	// Pause freezes every process of the sandbox; memory stays resident.
	Pause(ctx context.Context, id string) error
	// Resume thaws a paused sandbox.
	Resume(ctx context.Context, id string) error
	// Destroy stops the sandbox and removes what the backend holds of it;
	// destroying a sandbox that does not exist is not an error.
	Destroy(ctx context.Context, id string) error
	// State reports the sandbox's status, or ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// List returns the ids of every sandbox the backend has state for,
	// including those a previous backend object (a previous server
	// process) started.
	List(ctx context.Context) ([]string, error)
	// Stats reads the sandbox's resource usage on the host.
	Stats(ctx context.Context, id string) (Stats, error)
	// DialAgent opens a connection to the agent inside the sandbox, over
	// a channel that does not depend on the sandbox's network policy.
	DialAgent(ctx context.Context, id string) (net.Conn, error)
	// Wait blocks until the sandbox's runtime ends and says why, or until
	// ctx ends (ctx.Err()). It returns at once for a sandbox that is no
	// longer running or paused. A sandbox ended by Destroy or by a
	// checkpoint that does not leave it running ends too: the caller, who
	// did that, knows to ignore it.
	Wait(ctx context.Context, id string) (ExitReason, error)
	// Limits are those the sandbox runs under, as it was started or
	// restored: what an adopted sandbox commits.
	Limits(id string) (Limits, error)
	// Quiesce waits for runtime commands on the sandbox that a previous
	// server process left running.
	Quiesce(ctx context.Context, id string) error
	// Isolation says what really stands between a sandbox of this
	// backend and the host, as sandbox objects report it: one of the
	// Isolation* values (a microVM backend says whether it runs under
	// KVM or emulation).
	Isolation() string
}

// Backend names: what a recipe's runtime field, a create's runtime and a
// node's --runtimes flag name.
const (
	GVisor  = "gvisor"
	MicroVM = "microvm"
)

// Names are the backends a template may be built for, in the order errors
// list them.
func Names() []string { return []string{GVisor, MicroVM} }

// CheckName refuses a name that is no backend's, naming those there are.
func CheckName(name string) error {
	for _, n := range Names() {
		if name == n {
			return nil
		}
	}
	return fmt.Errorf("unknown runtime %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// Isolation values a backend reports.
const (
	IsolationGVisor     = "gvisor"
	IsolationMicroVMKVM = "microvm-kvm"
	IsolationMicroVMTCG = "microvm-tcg"
)

// ImageBuilder is implemented by a backend that boots from an artifact of
// its own, made from a template's finished root filesystem when the
// template is built (the microVM's ext4 image and initramfs). A backend
// that boots the directory as it is (gVisor) does not implement it.
type ImageBuilder interface {
	// PrepareTemplate makes the backend's artifact of the read-only root
	// filesystem rootfsDir in the empty directory outDir.
	PrepareTemplate(ctx context.Context, rootfsDir, outDir string) error
}

// BlockRootfs is implemented by a backend whose sandboxes boot from a raw
// disk image (RootfsBlock) its ImageBuilder made. The node then makes each
// sandbox's root volume hold a clone of the template's image instead of a
// snapshot of the template's rootfs directory; the volume's own snapshots
// (captures, branches, restores) carry the image as they carry a tree.
type BlockRootfs interface {
	// RootImage is the image's file name in the template's artifact
	// directory and in each sandbox's root volume.
	RootImage() string
	// CloneRootImage copies image src to dst in constant time (sharing
	// blocks) and fails rather than copying it whole.
	CloneRootImage(ctx context.Context, src, dst string) error
}

// Spec is everything a backend needs to start one sandbox.
type Spec struct {
	// ID names the sandbox to the backend; it is also the cgroup name.
	ID string
	// Rootfs is the sandbox's writable root filesystem on the host.
	Rootfs Rootfs
	// Network is the slot the sandbox is attached to. Attaching is the
	// backend's job: the slot offers its namespace, the sandbox side's
	// link and addresses (package network).
	Network *network.Slot
	// Agent is the agent binary on the host. It runs as the sandbox's
	// first process, with Env; how it gets in is the backend's choice
	// (e.g. a read-only mount of its directory).
	Agent    string
	Env      []string
	Hostname string
	Limits   Limits
	// Mounts are host directories (persistent volumes) bound into the
	// sandbox, in order. A backend without a shared host filesystem (a
	// VM) will make them extra disks or shares.
	Mounts []Mount
}

// RootfsKind says what a root filesystem is on the host; each backend
// takes the kinds it can boot from.
type RootfsKind string

const (
	// RootfsDir is a host directory (a btrfs subvolume), used as is.
	RootfsDir RootfsKind = "dir"
	// RootfsBlock is a raw ext4 image file, attached as a disk.
	RootfsBlock RootfsKind = "block"
)

// Rootfs is a volume handle: the root filesystem's host path and its kind.
type Rootfs struct {
	Kind RootfsKind
	Path string
	// Bytes is the size a block root filesystem's disk is grown to when it
	// is smaller (the sandbox's disk limit), its filesystem growing with
	// it; 0 leaves the disk as it is. A directory ignores it.
	Bytes int64
}

// Mount is one host directory bound into a sandbox.
type Mount struct {
	// Source is the host directory, Destination the absolute path inside
	// the sandbox.
	Source      string
	Destination string
	ReadOnly    bool
}

// Limits bound what one sandbox may use.
type Limits struct {
	VCPUs    int
	MemoryMB int
	Pids     int
}

// Status of a sandbox as the backend sees it.
type Status string

const (
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
	StatusCreated Status = "created"
)

// State is what the backend knows of one sandbox.
type State struct {
	Status Status
	// PID is the host process that holds the sandbox: killing it ends
	// the sandbox (a crash, as Wait reports it).
	PID int
}

// ExitReason says why a sandbox's runtime ended.
type ExitReason string

const (
	// ExitOOM: the host killed the sandbox for exceeding its memory limit.
	ExitOOM ExitReason = "oom"
	// ExitDied: any other end (a crash, a kill from the host, a Destroy).
	ExitDied ExitReason = "died"
)

// Stats are resource figures of the sandbox on the host.
type Stats struct {
	CPUNanos    uint64
	MemoryBytes uint64
	Pids        uint64
}
