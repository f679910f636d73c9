// Package node runs sandboxes on one machine: it prepares each sandbox's
// root volume and network slot, starts it on a runtime backend, keeps the
// channel to the agent inside, and records command sessions. It holds no
// durable state of its own; the control plane decides and remembers.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-platform/space/internal/gateway"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
)

// Volumes is the copy-on-write storage the node takes root filesystems from.
type Volumes interface {
	Snapshot(src, dst string, readOnly bool) (string, error)
	Delete(name string) error
	SetLimit(name string, bytes int64) error
	SetWriteLimit(name string, bytes int64) error
	Path(name string) string
	List(prefix string) ([]string, error)
	Exists(name string) bool
	Rename(src, dst string) error
	// Create, Usage and Sync serve persistent volumes.
	Create(name string) (string, error)
	Usage(name string) (int64, error)
	Sync(name string) error
}

// Config wires a node.
type Config struct {
	// Runtimes are the node's sandbox backends by name (runtime.GVisor,
	// runtime.MicroVM); at least one. Each sandbox runs on the one its
	// create names, its template's default otherwise (backends.go).
	Runtimes map[string]runtime.Runtime
	Volumes  Volumes
	// AgentBinary is the static agent executable; it is copied into
	// the agent store under StateDir and is the agent of every new
	// sandbox (a restored one gets the agent its image was taken with).
	AgentBinary string
	StateDir    string
	// ImagesDir holds template images (images/templates/<id>).
	ImagesDir string
	// SessionOutputLimit bounds the output each session's journal holds
	// in memory (bytes, 8 MiB by default).
	SessionOutputLimit int64
	// SessionSpillDir holds the files session output spills to past
	// SessionOutputLimit (journal_spill.go): by default spillArea in the
	// volumes' pool, StateDir/sessions without volumes. It must not lie
	// in any sandbox's volume. Its contents are the node process's own:
	// they go when it starts.
	SessionSpillDir string
	// SessionSpillLimit bounds each session's spill file (bytes);
	// defaultSessionSpillLimit when 0, no spill when negative.
	SessionSpillLimit int64
	// MaxSessions bounds the sessions each sandbox keeps, running and
	// finished (defaultMaxSessions when 0): past it the finished ones
	// that ended first are forgotten, and with all running a new one is
	// refused (ErrTooManySessions).
	MaxSessions int
	// SessionSpillPerSandbox bounds what one sandbox's sessions spill
	// together (bytes; defaultSessionSpillPerSandbox when 0).
	SessionSpillPerSandbox int64
	// SessionReaderTimeout is how long a session's output waits for an
	// attached reader that has not read what the journal must let go of
	// and makes no progress, before the reader is cut off (20 s by
	// default; see Journal).
	SessionReaderTimeout time.Duration
	// Namespaces is the directory of the slots' network namespaces
	// (<data-dir>/netns); required.
	Namespaces *network.Namespaces
	// Egress connects sandboxes to the host's network under their
	// policies; nil leaves every sandbox without a way out.
	Egress *network.Egress
	// Gateway runs each slot's resolver and egress proxy; nil with Egress
	// nil.
	Gateway *gateway.Gateway
	// ID names the node in its Info; Capacity is what it offers (Info
	// reports it as configured).
	ID       string
	Capacity Capacity
	Logger   *slog.Logger
}

// Node is the node service.
type Node struct {
	cfg Config
	// agentDigest is the sha256 of the configured agent, which new
	// sandboxes run. A saved image holds the agent that ran when it was
	// taken, so a restore runs that one instead (agents.go).
	agentDigest string
	// legacyDigest is the agent of nodes from before the agent store, ""
	// if this node never was one: what images without a digest hold.
	legacyDigest string
	agents       *agentStore
	log          *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	// committed holds the limits of every sandbox the node has accepted
	// to run (pooled ones included) and not released: from the start of
	// a create or restore to its destroy, suspend or halt. Info sums it.
	committed     map[string]runtime.Limits
	templateLocks map[string]*sync.Mutex
	pools         pools
	builds        map[string]bool // build sandboxes running (build.go)
	events        events          // subscribers of Events (events.go)
	metrics       metricsHistory  // sandboxes' resource samples (metrics.go)
	// lifecycle serialises the calls that make or unmake one sandbox's
	// runtime (idlock.go).
	lifecycle idLocks
	// runtimeOf caches the backend names of sandboxes' runtime records
	// (backends.go), which every call on a sandbox reads.
	runtimeOf sync.Map // sandbox id → backend name

	spillMu      sync.Mutex
	spillBudgets map[string]*spillBudget // by sandbox (journal_spill.go)
}

// Capacity is what a node offers in total.
type Capacity struct {
	VCPUs    int
	MemoryMB int
	DiskMB   int
}

// agentName is the agent binary's file name in the agent store.
const agentName = "space-agent"

// New prepares the node's state directory and agent copy.
func New(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionOutputLimit <= 0 {
		cfg.SessionOutputLimit = 8 << 20
	}
	switch {
	case cfg.SessionSpillDir != "":
	case cfg.Volumes != nil:
		cfg.SessionSpillDir = cfg.Volumes.Path(spillArea)
	case cfg.StateDir != "":
		cfg.SessionSpillDir = filepath.Join(cfg.StateDir, "sessions")
	}
	if cfg.SessionSpillLimit == 0 {
		cfg.SessionSpillLimit = defaultSessionSpillLimit
	}
	if cfg.SessionReaderTimeout <= 0 {
		cfg.SessionReaderTimeout = defaultReaderTimeout
	}
	if err := checkSpillDir(cfg.SessionSpillDir, cfg.Volumes); err != nil {
		return nil, err
	}
	if cfg.ImagesDir == "" {
		cfg.ImagesDir = filepath.Join(cfg.StateDir, "images")
	}
	if cfg.Namespaces == nil {
		return nil, errors.New("node: no network namespace directory")
	}
	if len(cfg.Runtimes) == 0 {
		return nil, errors.New("node: no runtime backend")
	}
	n := &Node{cfg: cfg, log: cfg.Logger, sandboxes: map[string]*Sandbox{}}
	if err := n.setupAgents(cfg.AgentBinary); err != nil {
		return nil, err
	}
	n.sweepSpills()
	return n, nil
}

// lookup returns the node's handle of a running sandbox.
func (n *Node) lookup(id string) (*Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, ok := n.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrNoSandbox)
	}
	return sb, nil
}

// Stats reads a sandbox's resource usage from its runtime.
func (n *Node) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if err := checkID(id); err != nil {
		return runtime.Stats{}, err
	}
	return n.rt(id).Stats(ctx, id)
}

// rootfs is backend's handle of a root volume: the directory, or the
// image in it for a backend that boots one (makeRootVolume), whose disk is
// grown to diskMB (0: as it is).
func (n *Node) rootfs(backend runtime.Runtime, volume string, diskMB int) runtime.Rootfs {
	if block, ok := backend.(runtime.BlockRootfs); ok {
		return runtime.Rootfs{Kind: runtime.RootfsBlock, Path: filepath.Join(n.cfg.Volumes.Path(volume), block.RootImage()), Bytes: int64(diskMB) << 20}
	}
	return runtime.Rootfs{Kind: runtime.RootfsDir, Path: n.cfg.Volumes.Path(volume)}
}

// CloseAgents closes the node's channels to every sandbox's agent for
// good (the sandboxes run on). A process that stops its node without exiting (a server shut
// down and started again in one process) must: a microVM's virtio-serial
// port serves one connection at a time, and the HTTP/2 pings of a channel
// left open would keep it from the node that adopts the guest.
func (n *Node) CloseAgents() {
	n.mu.Lock()
	sbs := make([]*Sandbox, 0, len(n.sandboxes))
	for _, sb := range n.sandboxes {
		sbs = append(sbs, sb)
	}
	n.mu.Unlock()
	for _, sb := range sbs {
		if sb.Agent != nil {
			sb.Agent.Close()
		}
	}
}

func (n *Node) register(sb *Sandbox) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sandboxes[sb.ID] = sb
}

// commit counts a sandbox's limits as the node's from now on.
func (n *Node) commit(id string, l runtime.Limits) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.committed == nil {
		n.committed = map[string]runtime.Limits{}
	}
	n.committed[id] = l
}

// uncommit stops counting a sandbox's limits: its runtime is gone.
func (n *Node) uncommit(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.committed, id)
}

func (n *Node) unregister(id string) *Sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.sandboxes[id]
	delete(n.sandboxes, id)
	n.events.forget(id)
	return sb
}
