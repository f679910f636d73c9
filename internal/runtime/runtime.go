// Package runtime holds the vocabulary shared by sandbox runtime backends
// (gVisor today, a microVM later): what a sandbox is started from, the limits
// it runs under and what a backend reports back. The interface the node
// drives lives in package node, where it is consumed.
package runtime

import "errors"

// ErrNotFound is returned for a sandbox the backend does not know.
var ErrNotFound = errors.New("runtime sandbox not found")

// Spec is everything a backend needs to start one sandbox.
type Spec struct {
	// ID names the sandbox to the backend; it is also the cgroup name.
	ID string
	// RootfsPath is the sandbox's writable root filesystem on the host.
	RootfsPath string
	// NetNSPath is the network namespace the sandbox joins.
	NetNSPath string
	// AgentDir is a host directory holding the agent binary; it is mounted
	// read-only at AgentMountPoint.
	AgentDir string
	// Args is the first process (the agent) and Env its environment.
	Args     []string
	Env      []string
	Hostname string
	Limits   Limits
	// Mounts are host directories (persistent volumes) bind-mounted into
	// the sandbox, in order.
	Mounts []Mount
}

// Mount is one host directory bound into a sandbox.
type Mount struct {
	// Source is the host directory, Destination the absolute path inside
	// the sandbox.
	Source      string
	Destination string
	ReadOnly    bool
}

// AgentMountPoint is where the agent directory appears inside a sandbox.
const AgentMountPoint = "/.space/bin"

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
	PID    int
}

// Stats are resource figures read from the sandbox's cgroup.
type Stats struct {
	CPUNanos    uint64
	MemoryBytes uint64
	Pids        uint64
}
