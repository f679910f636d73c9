// Package controlplane decides what happens to sandboxes: it validates
// requests, places them on the node, drives every sandbox through one state
// machine (state.go), persists each transition before acting on it, enforces
// lifetimes, and recovers after a restart.
package controlplane

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

const (
	sandboxBucket = "sandboxes"
	eventBucket   = "sandbox_events"
)

// Node is the node as the control plane drives it: the node contract and
// nothing more, so that it may run in this process or on another machine.
type Node = nodeapi.Node

// Templates resolves the template a sandbox is created from.
type Templates interface {
	// Resolve returns the template's node-level description and its
	// catalog name, looking nameOrID up as the scope sees the catalog
	// (its project's templates and the built-in ones). It returns an
	// error wrapping ErrUnknownTemplate or ErrTemplateNotReady.
	Resolve(scope project.Scope, nameOrID string) (nodeapi.TemplateSpec, string, error)
}

// Quotas are the per-project limits the control plane enforces;
// *project.Quotas satisfies it.
type Quotas interface {
	Of(project string) project.Quota
	AllowCreate(project string, n int) (retryAfter time.Duration, ok bool)
}

// QuotaError is a request refused by its project's quota. RetryAfter is
// set when waiting helps (the create rate).
type QuotaError struct {
	Project    string
	Message    string
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("project %s: quota exceeded: %s", e.Project, e.Message)
}

// Errors the API maps to status codes.
var (
	ErrNotFound         = errors.New("not found")
	ErrUnknownTemplate  = errors.New("template not found")
	ErrTemplateNotReady = errors.New("template is not ready")
	ErrInvalid          = errors.New("invalid request")
	ErrCapacity         = errors.New("node capacity exceeded")
)

// Defaults fill in what a create request leaves out.
type Defaults struct {
	Template string
	VCPUs    int
	MemoryMB int
	DiskMB   int
	Pids     int
	TimeoutS int
	// Retention is how long a stopped or failed sandbox stays visible.
	Retention time.Duration
	// IdleSuspendS suspends a sandbox after so long without activity.
	IdleSuspendS int
	// SuspendedRetention is how long a suspended sandbox is kept before
	// it is deleted.
	SuspendedRetention time.Duration
	// SnapshotRetention is how long rolling snapshots are kept.
	SnapshotRetention time.Duration
	// MinSnapshotInterval is the floor of a sandbox's snapshot_interval_s
	// (0: DefaultMinSnapshotInterval). Each rolling snapshot captures
	// memory and disk, so a small floor lets one client keep the node
	// busy snapshotting: an operator lowers it for a trusted workload
	// (or a test) only.
	MinSnapshotInterval time.Duration
	// BandwidthMbit and MaxConnections are every sandbox's network limits
	// (0: unlimited); a create request may only lower them.
	BandwidthMbit, MaxConnections int
}

// Config wires a control plane.
type Config struct {
	Store     store.Store
	Templates Templates
	Defaults  Defaults
	Logger    *slog.Logger
	Metrics   *metrics.Registry
	// ReplicaID names this control plane among the replicas sharing a
	// store: its leases are held under it, and the transitions it runs
	// are recorded as its (Sandbox.Owner). Default: a random name.
	ReplicaID string
	// LeaseTTL is how long the leader lease and a replica's liveness lease
	// outlive their last renewal (renewed at a third of it); another
	// replica takes over within about that. Default 6s.
	LeaseTTL time.Duration
	// LegacyImagesDir is the directory where versions that recorded
	// checkpoint images by path kept them; such records are converted to
	// image names (their path below it) when loaded.
	LegacyImagesDir string
	// Secrets are the secrets credential rules may name.
	Secrets Secrets
	// Quotas limits each project; nil: unlimited.
	Quotas Quotas
	// HostPaths hides the node's directories in the reasons clients read
	// (nil: none hidden).
	HostPaths *hostpath.Hider
	// Nodes reaches the nodes sandboxes run on (OneNode for serve).
	Nodes Nodes
	// LocalNode names the node in this process (serve's), if any: Recover
	// reconciles it before it returns, as a cluster's nodes are when they
	// join, and records of versions that named no node, or serve's node
	// by its old name (LegacyLocalNode), are on it. OneNode sets it.
	LocalNode string
}

// ControlPlane is the single authority over sandbox state.
type ControlPlane struct {
	cfg Config
	log *slog.Logger

	createLatency *metrics.Histogram
	// claimLatency times the node's half of a pooled create (Claim: the
	// agent's re-key and the owner's network policy), the floor that
	// space bench holds create_pooled against.
	claimLatency *metrics.Histogram

	// shared is set when other replicas write the store (replicas.go).
	shared    bool
	replicaID string
	// leading is held while this replica holds the leader lease and runs
	// the background loops; alive while it renews its liveness lease.
	leading, alive atomic.Bool

	mu        sync.Mutex
	sandboxes map[string]*record
	changed   chan struct{} // closed and replaced on every state change
	// lastActive is when each sandbox last saw an API call, agent call or
	// process output; idle suspend reads it.
	lastActive map[string]time.Time
	// builds are the template builds this replica runs, charged to their
	// projects' quotas (ChargeBuild).
	builds map[*buildCharge]bool
	// eventsMu serialises appends to the event history in the store.
	eventsMu sync.Mutex
	// snapMu guards snapshotUsers and makes "look up and hold a snapshot"
	// atomic against DeleteSnapshot.
	snapMu sync.Mutex
	// snapshotUsers names, per snapshot key, the operations reading it now.
	snapshotUsers map[string][]string
	// fleet tracks the nodes (routing.go).
	fleet fleet
	// sweeps holds, per node id, the lock that keeps sandbox starts and
	// a reconcile's sweep of that node apart (nodeSweep).
	sweeps sync.Map // string → *sync.RWMutex
}

// nodeSweep is the lock between a node's sweep and the starts on it. A
// start (launch) holds it shared for its node call; a reconcile holds it
// exclusively from computing which sandboxes the node keeps until the
// node's sweep returns. A sandbox whose record came after that list is
// then not made on the node until the sweep that would remove it is over.
func (cp *ControlPlane) nodeSweep(node string) *sync.RWMutex {
	l, _ := cp.sweeps.LoadOrStore(node, &sync.RWMutex{})
	return l.(*sync.RWMutex)
}

// record is the persisted sandbox plus its in-memory lock.
type record struct {
	Sandbox
	// lock serialises lifecycle operations on this sandbox, across
	// replicas on a shared store (replicas.go).
	lock recordLock
	// persisted is set once the record is in the store; gen counts this
	// replica's writes of it, so that a reload racing with one keeps the
	// newer (both guarded by ControlPlane.mu).
	persisted bool
	gen       uint64
	// cancelStart aborts a start in progress (guarded by ControlPlane.mu),
	// so a delete does not wait for a slow ready check.
	cancelStart context.CancelFunc
}

// Sandbox is the control plane's durable view of one sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Project owns the sandbox; "" (records from before projects) is
	// project.Default.
	Project     string            `json:"project,omitempty"`
	Template    string            `json:"template"`
	TemplateID  string            `json:"template_id"`
	State       string            `json:"state"`
	Reason      string            `json:"reason,omitempty"`
	VCPUs       int               `json:"vcpus"`
	MemoryMB    int               `json:"memory_mb"`
	DiskMB      int               `json:"disk_mb"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	AccessToken string            `json:"access_token"`
	CreatedAt   time.Time         `json:"created_at"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	ExpiresAt   time.Time         `json:"expires_at"`
	// TimeoutS is the lifetime given at create or by the last SetTimeout;
	// a resume from suspend starts it again.
	TimeoutS int        `json:"timeout_s"`
	EndedAt  *time.Time `json:"ended_at,omitempty"`

	Lifecycle Lifecycle `json:"lifecycle"`
	// SuspendedAt is when the sandbox was last suspended; its image (on
	// the node, by name) is Image.
	SuspendedAt *time.Time `json:"suspended_at,omitempty"`
	Image       string     `json:"image,omitempty"`
	// DiskOnly marks a sandbox suspended without its memory (keep_memory
	// false): it has no image, and resume boots its root volume afresh.
	DiskOnly bool `json:"disk_only,omitempty"`
	// LegacyImageDir is the image's path as earlier versions recorded
	// it; Recover turns it into Image.
	LegacyImageDir string `json:"image_dir,omitempty"`
	// BranchOf and Snapshot say where a sandbox was restored from.
	BranchOf string `json:"branch_of,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Source is the capture a branch or a sandbox started from a snapshot
	// restores from, so that a start a crash interrupted can run again.
	Source *Source `json:"source,omitempty"`
	// Restoring is the snapshot a restore in place is bringing in while the
	// restore is unfinished: recovery then puts the old sandbox back.
	Restoring string `json:"restoring,omitempty"`
	// Recovered says how the sandbox came back after the host lost it.
	Recovered string `json:"recovered,omitempty"`
	// Owner is the control-plane replica that moved the sandbox into its
	// state last: while that is transitional, the replica running the
	// transition; if it dies, the leader takes over (replicas.go).
	Owner string `json:"owner,omitempty"`
	// LastSnapshotAt drives rolling snapshots.
	LastSnapshotAt *time.Time `json:"last_snapshot_at,omitempty"`
	// SnapshotTriedAt is when a rolling snapshot last failed: the next is
	// tried an interval after it, not at every check.
	SnapshotTriedAt *time.Time `json:"snapshot_tried_at,omitempty"`
	// Network is the egress policy (network.go); nil is the default.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Credentials are the credential rules (credentials.go): secret names
	// and placeholders, never secret values.
	Credentials []credentials.Rule `json:"credentials,omitempty"`
	// Traffic is the exposed ports' token and the network limits
	// (traffic.go); nil is public and the node's limits.
	Traffic *Traffic `json:"traffic,omitempty"`
	// Node is the node the sandbox runs on; "" (records of versions with
	// one node) is serve's one node.
	Node string `json:"node,omitempty"`
	// Mounts are the persistent volumes it mounts (volumes.go), fixed
	// for its life.
	Mounts []Mount `json:"mounts,omitempty"`
	// Runtime is the backend the sandbox runs on for its life ("",
	// records from before the choice: gVisor); Isolation what the node
	// reported that backend gives ("": gVisor's).
	Runtime   string `json:"runtime,omitempty"`
	Isolation string `json:"isolation,omitempty"`
}

// RuntimeName is the backend the sandbox runs on.
func (s *Sandbox) RuntimeName() string {
	if s.Runtime == "" {
		return runtime.GVisor
	}
	return s.Runtime
}

// IsolationName is what the sandbox's backend isolates it with.
func (s *Sandbox) IsolationName() string {
	if s.Isolation == "" && s.RuntimeName() == runtime.GVisor {
		return runtime.IsolationGVisor
	}
	return s.Isolation
}

// Lifecycle holds a sandbox's lifetime settings; its wire form is the
// record's.
type Lifecycle = apiv1.Lifecycle

// API returns the public view of a sandbox.
func (s *Sandbox) API() apiv1.Sandbox {
	return apiv1.Sandbox{
		ID: s.ID, Project: project.Of(s.Project), Template: s.TemplateName(), TemplateID: s.TemplateID, State: s.State, Reason: s.Reason,
		VCPUs: s.VCPUs, MemoryMB: s.MemoryMB, DiskMB: s.DiskMB, Env: s.Env, Metadata: s.Metadata,
		CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, ExpiresAt: s.ExpiresAt, AccessToken: s.AccessToken,
		SuspendedAt: s.SuspendedAt, DiskOnly: s.DiskOnly, BranchOf: s.BranchOf, Snapshot: s.Snapshot, Recovered: s.Recovered,
		Network:   s.Traffic.view(s.Network.api()),
		Lifecycle: s.Lifecycle, TrafficAccessToken: s.TrafficToken(),
		Credentials: credentialsAPI(s.Credentials), VolumeMounts: mountsAPI(s.Mounts),
		Runtime: s.RuntimeName(), Isolation: s.IsolationName(),
	}
}

// TemplateName is the sandbox's template as its project names it: the
// catalog files a project's templates as "<project>/<name>".
func (s *Sandbox) TemplateName() string {
	return strings.TrimPrefix(s.Template, project.Of(s.Project)+"/")
}

// New builds a control plane; call Recover before serving requests.
func New(cfg Config) *ControlPlane {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewRegistry()
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = newReplicaID()
	}
	cp := &ControlPlane{
		cfg:        cfg,
		log:        cfg.Logger,
		shared:     cfg.Store.Shared(),
		replicaID:  cfg.ReplicaID,
		sandboxes:  map[string]*record{},
		changed:    make(chan struct{}),
		lastActive: map[string]time.Time{},

		snapshotUsers: map[string][]string{},
	}
	cp.createLatency = cfg.Metrics.Histogram("space_sandbox_create_seconds",
		"Time from create request to running.", []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30})
	cp.claimLatency = cfg.Metrics.Histogram("space_pool_claim_seconds",
		"Time the node took to hand over a pooled sandbox: its agent re-keyed (POST /init) and the owner's network policy applied.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1})
	cfg.Metrics.GaugeFunc("space_sandboxes", "Sandboxes by state.", "state", cp.countByState)
	cfg.Metrics.GaugeFunc("space_pool_ready", "Warm pool sandboxes ready, by template.", "template", cp.poolsReady)
	cfg.Metrics.GaugeFunc("space_controlplane_leader", "1 while this control-plane replica holds the leader lease and runs the background loops.",
		"replica", func() map[string]float64 {
			v := 0.0
			if cp.Leading() {
				v = 1
			}
			return map[string]float64{cp.replicaID: v}
		})
	return cp
}

func (cp *ControlPlane) countByState() map[string]float64 {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[string]float64{}
	for _, s := range []string{apiv1.StateStarting, apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended, apiv1.StateStopped, apiv1.StateFailed} {
		out[s] = 0
	}
	for _, r := range cp.sandboxes {
		out[r.State]++
	}
	return out
}

// newID names a new sandbox.
func newID() string { return sandboxid.New() }

func newToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// NotFound is the error of a sandbox that does not exist, or that the
// caller's scope does not see: the two must read the same.
func NotFound(id string) error { return fmt.Errorf("sandbox %s: %w", id, ErrNotFound) }

// lookup returns the record for id. On a shared store a record not cached
// yet (another replica created it a moment ago) is read from the store.
func (cp *ControlPlane) lookup(id string) (*record, error) {
	cp.mu.Lock()
	r, ok := cp.sandboxes[id]
	if ok {
		cp.bind(r)
	}
	cp.mu.Unlock()
	if ok {
		return r, nil
	}
	if !cp.shared || id == "" || strings.ContainsRune(id, 0) {
		return nil, NotFound(id)
	}
	var s Sandbox
	if err := cp.cfg.Store.Get(sandboxBucket, id, &s); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, NotFound(id)
		}
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return cp.adopt(s), nil
}

// snapshot copies a record's public fields under the control plane lock.
func (cp *ControlPlane) snapshot(r *record) Sandbox {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return r.Sandbox
}

// update changes a record, persists it, and wakes waiters. The change is
// durable before anything acts on it.
func (cp *ControlPlane) update(r *record, fn func(s *Sandbox)) error {
	if cp.shared && r.lock.tryLocal() {
		// A caller that does not hold the sandbox's lock (SetTimeout, a
		// network change) would write its cached copy over what another
		// replica changed: it writes under the lock, on the record as
		// stored.
		r.lock.lockShared()
		defer r.lock.Unlock()
	}
	cp.mu.Lock()
	next := r.Sandbox
	fn(&next)
	if !r.persisted || next.State != r.State {
		// Whoever moves a sandbox into a transition runs it.
		next.Owner = ""
		if transitional(next.State) {
			next.Owner = cp.replicaID
		}
	}
	cp.mu.Unlock()
	if err := cp.cfg.Store.Put(sandboxBucket, next.ID, next); err != nil {
		return fmt.Errorf("persist sandbox %s: %w", next.ID, err)
	}
	cp.mu.Lock()
	r.Sandbox = next
	r.persisted = true
	r.gen++
	cp.bind(r)
	cp.wake()
	cp.mu.Unlock()
	return nil
}

// setState moves a sandbox along the state machine and records the event.
// Changes in also are made in the same durable update.
func (cp *ControlPlane) setState(r *record, to, reason string, also ...func(*Sandbox)) error {
	// A reason quotes errors of the layers below, and clients read it.
	reason = cp.cfg.HostPaths.String(reason)
	from := cp.snapshot(r).State
	if from != to && !canMove(from, to) {
		return fmt.Errorf("sandbox %s: illegal transition %s → %s", r.ID, from, to)
	}
	err := cp.update(r, func(s *Sandbox) {
		for _, f := range also {
			f(s)
		}
		s.State = to
		s.Reason = reason
		now := time.Now().UTC()
		if to == apiv1.StateRunning && s.StartedAt == nil {
			s.StartedAt = &now
		}
		if terminal(to) {
			s.EndedAt = &now
		}
	})
	if err != nil {
		return err
	}
	cp.recordEvent(r.ID, Event{Time: time.Now().UTC(), Type: "state", From: from, To: to, Message: reason})
	return nil
}

// Get returns one sandbox, if the scope sees it; a sandbox of another
// project is not found, exactly like a missing one.
func (cp *ControlPlane) Get(scope project.Scope, id string) (Sandbox, error) {
	r, err := cp.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	if cp.shared {
		// A client may read through this replica what it just wrote
		// through another, faster than the notification comes.
		cp.reload(r)
		if _, err := cp.lookup(id); err != nil {
			return Sandbox{}, err
		}
	}
	s := cp.snapshot(r)
	if !scope.Sees(s.Project) {
		return Sandbox{}, NotFound(id)
	}
	return s, nil
}

// Owner returns the project sandbox id belongs to; once the sandbox is
// gone, the project of the snapshots it left. ok is false when neither
// exists.
func (cp *ControlPlane) Owner(id string) (owner string, ok bool) {
	cp.mu.Lock()
	r, found := cp.sandboxes[id]
	if found {
		owner = project.Of(r.Project)
	}
	cp.mu.Unlock()
	if found {
		return owner, true
	}
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return "", false
	}
	// On a shared store another replica may have created it a moment
	// ago: its record is in the store before this replica's cache hears
	// of it, and a create answered there must not be 404 here.
	if r, err := cp.lookup(id); err == nil {
		return project.Of(cp.snapshot(r).Project), true
	}
	snaps, _ := cp.Snapshots(id)
	if len(snaps) == 0 {
		return "", false
	}
	return project.Of(snaps[0].Project), true
}

// Filter selects sandboxes in List.
type Filter struct {
	State    string
	Metadata map[string]string
}

// List returns the sandboxes the scope sees that match f, oldest first.
func (cp *ControlPlane) List(scope project.Scope, f Filter) []Sandbox {
	if cp.shared {
		_ = cp.resync() // a store that cannot be read: the cache's view
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []Sandbox
	for _, r := range cp.sandboxes {
		if f.State != "" && r.State != f.State || !scope.Sees(r.Project) {
			continue
		}
		match := true
		for k, v := range f.Metadata {
			if r.Metadata[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, r.Sandbox)
		}
	}
	sortByCreation(out)
	return out
}

// InUse reports whether a live sandbox uses the template with this id.
func (cp *ControlPlane) InUse(templateID string) bool {
	return cp.CountUsing(project.Everything, templateID) > 0
}

// Wait blocks until the sandbox reaches state, ends in another terminal
// state (StateError), or ctx ends.
func (cp *ControlPlane) Wait(ctx context.Context, id, state string) (Sandbox, error) {
	return cp.waitFor(ctx, id, "wait for "+state, func(s Sandbox) bool { return s.State == state })
}

// waitWhile blocks while busy(sandbox) holds, until the sandbox ends in a
// terminal state (StateError), or ctx ends.
func (cp *ControlPlane) waitWhile(ctx context.Context, id string, busy func(Sandbox) bool) (Sandbox, error) {
	return cp.waitFor(ctx, id, "wait for its transition to end", func(s Sandbox) bool { return !busy(s) })
}

// waitFor blocks until done(sandbox) holds; want names the wait in the
// StateError of a sandbox that ended first.
func (cp *ControlPlane) waitFor(ctx context.Context, id, want string, done func(Sandbox) bool) (Sandbox, error) {
	for {
		if _, err := cp.lookup(id); err != nil {
			return Sandbox{}, err
		}
		cp.mu.Lock()
		r, ok := cp.sandboxes[id]
		changed := cp.changed
		var s Sandbox
		if ok {
			s = r.Sandbox
		}
		cp.mu.Unlock()
		if !ok {
			return Sandbox{}, NotFound(id)
		}
		if done(s) {
			return s, nil
		}
		if terminal(s.State) {
			msg := want
			if s.Reason != "" {
				msg += " (" + s.Reason + ")"
			}
			return s, &StateError{ID: id, State: s.State, Want: msg}
		}
		var poll <-chan time.Time
		if cp.shared {
			// Notifications can be late or lost between reconnects.
			poll = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-changed:
		case <-poll:
			cp.refresh(id)
		}
	}
}

// CountUsing counts the live sandboxes the scope sees that were created
// from the template with this id.
func (cp *ControlPlane) CountUsing(scope project.Scope, templateID string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	n := 0
	for _, r := range cp.sandboxes {
		if r.TemplateID == templateID && !terminal(r.State) && scope.Sees(r.Project) {
			n++
		}
	}
	return n
}
