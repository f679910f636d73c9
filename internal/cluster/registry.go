// Package cluster is the control plane's view of its nodes: the registry
// of the nodes that joined (their state, heartbeats and last reported
// Info) and the placement of new sandboxes on them.
//
// A node's record is persisted through Store, so every control-plane
// replica sees the same nodes and a restarted one finds them again; a
// node's state is what an operator set (ready, cordoned, draining, lost)
// unless its heartbeats stopped for longer than the heartbeat timeout, in
// which case it reads unreachable until the next one arrives.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

// Store is the part of the control plane's store the registry uses: JSON
// records in buckets (internal/store's Store, either backend). Get of a
// missing record returns an error wrapping store.ErrNotFound.
type Store interface {
	Put(bucket, key string, v any) error
	Get(bucket, key string, v any) error
	Delete(bucket, key string) error
	Each(bucket string, fn func(key string, data []byte) error) error
}

// Two buckets, so that a heartbeat (written every few seconds, possibly by
// another replica) never overwrites what an operator set, and an operator's
// cordon never loses a heartbeat.
const (
	nodesBucket      = "nodes"
	heartbeatsBucket = "node_heartbeats"
)

// State is a node's state as the API reports it.
type State string

// Node states.
const (
	// Ready: the node takes new sandboxes.
	Ready State = "ready"
	// Cordoned: the node keeps its sandboxes and takes no new ones.
	Cordoned State = "cordoned"
	// Draining: the node takes no new sandboxes and its sandboxes are to
	// be moved to other nodes (see Drainer).
	Draining State = "draining"
	// Unreachable: the node missed its heartbeats for longer than the
	// heartbeat timeout; computed, and undone by the next heartbeat.
	Unreachable State = "unreachable"
	// Lost: an operator removed the node with force; its sandboxes are
	// written off. A lost node cannot join again until its record is
	// removed.
	Lost State = "lost"
)

// Errors of the registry (wrapped, with the node named).
var (
	ErrUnknownNode = errors.New("node not found")
	// ErrConflict: the operation does not apply to the node's state.
	ErrConflict = errors.New("node state conflict")
	// ErrInvalid: a malformed id or address.
	ErrInvalid = errors.New("invalid node")
	// ErrNoCapacity: no schedulable node can take a sandbox (see
	// CapacityError).
	ErrNoCapacity = errors.New("no node can take the sandbox")
)

// DefaultHeartbeatTimeout is how long a node may stay silent before it is
// unreachable.
const DefaultHeartbeatTimeout = 15 * time.Second

// Node is one node as the registry knows it.
type Node struct {
	ID string `json:"id"`
	// Address is the URL the node advertised, where the control plane
	// reaches its RPC service.
	Address string `json:"address"`
	State   State  `json:"state"`
	// Reason says why the node is in its state, when it is not ready.
	Reason        string       `json:"reason,omitempty"`
	RegisteredAt  time.Time    `json:"registered_at"`
	LastHeartbeat time.Time    `json:"last_heartbeat"`
	Info          nodeapi.Info `json:"info"`
}

// Schedulable reports whether new sandboxes may be placed on the node.
func (n Node) Schedulable() bool { return n.State == Ready }

// record is a node's persisted record: what it advertised and what an
// operator set. State is never Unreachable here.
type record struct {
	ID           string    `json:"id"`
	Address      string    `json:"address"`
	State        State     `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
}

// heartbeat is a node's last heartbeat.
type heartbeat struct {
	At   time.Time    `json:"at"`
	Info nodeapi.Info `json:"info"`
}

// Drainer moves a draining node's sandboxes to other nodes (suspend, ship
// the volume and memory image, resume on the target: controlplane.Drainer);
// the registry only records the state and hands the node over.
type Drainer interface {
	// StartDrain begins moving the sandboxes of node id away and returns
	// without waiting for the move.
	StartDrain(id string) error
}

// Config configures a Registry.
type Config struct {
	Store Store
	// HeartbeatTimeout is how long a node may go without a heartbeat
	// before it is unreachable (DefaultHeartbeatTimeout when zero).
	HeartbeatTimeout time.Duration
	// Now is the clock (time.Now when nil); tests inject theirs.
	Now func() time.Time
	// Drainer, when set, is started by Drain; nil: a drain only marks the
	// node draining.
	Drainer Drainer
	// Placement tunes Place.
	Placement PlacementConfig
	// ReadCacheTTL, when positive, lets List, Get and Place answer from
	// the nodes and heartbeats as read from the store at most this long
	// ago (this registry's own writes drop the copy at once). On a shared
	// store every create otherwise reads both buckets more than once
	// (docs/performance.md, "Cluster mode"); another replica's cordon or a
	// node's heartbeat through another replica is then seen up to this
	// late. Read-modify-writes always read the store.
	ReadCacheTTL time.Duration
}

// Registry is the control plane's registry of nodes. It is safe for
// concurrent use.
type Registry struct {
	cfg Config

	// mu serializes this replica's writes (a read-modify-write of a
	// record) and guards reservations and rng.
	mu           sync.Mutex
	reservations []reservation
	rng          *rand.Rand

	// cacheMu guards cached, the last read of both buckets (ReadCacheTTL).
	cacheMu sync.Mutex
	cached  *listing
	// cacheGen counts forget calls: a read that began before one is not
	// kept, as it may miss that write.
	cacheGen uint64
}

// listing is one read of the nodes and their heartbeats.
type listing struct {
	at   time.Time
	recs []record
	hbs  map[string]heartbeat
}

// New returns a registry over cfg.Store.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil {
		return nil, errors.New("cluster: a registry needs a store")
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Placement = cfg.Placement.withDefaults()
	return &Registry{cfg: cfg, rng: cfg.Placement.Rand}, nil
}

// ValidID reports whether id can name a node: 1 to 63 lowercase letters,
// digits and '-', starting and ending with a letter or digit (a DNS label,
// so that it can name a host or a Kubernetes object too).
func ValidID(id string) error {
	if id == "" || len(id) > 63 || id[0] == '-' || id[len(id)-1] == '-' {
		return fmt.Errorf("%w: node id %q must be 1 to 63 lowercase letters, digits and '-', not starting or ending with '-'", ErrInvalid, id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: node id %q must be 1 to 63 lowercase letters, digits and '-', not starting or ending with '-'", ErrInvalid, id)
		}
	}
	return nil
}

// InProcessScheme is the scheme of the address a node in the control
// plane's own process registers with (`space serve`): the control plane
// drives it by calls, not RPC.
const InProcessScheme = "inproc"

// InProcessAddress is the address of node id when it runs in the control
// plane's process.
func InProcessAddress(id string) string { return InProcessScheme + "://" + id }

// validAddress checks an advertised URL: http or https, with a host, or
// the in-process address of the node that registers (id).
func validAddress(id, address string) error {
	if address == InProcessAddress(id) {
		return nil
	}
	u, err := url.Parse(address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w: address %q must be an http:// or https:// URL with a host", ErrInvalid, address)
	}
	return nil
}

// Register records a node that joins, or joins again (after its own
// restart or the control plane's): its address and Info are updated, and
// what an operator set (cordoned, draining) stays. A lost node is refused
// until its record is removed.
func (r *Registry) Register(id, address string, info nodeapi.Info) (Node, error) {
	if err := ValidID(id); err != nil {
		return Node{}, err
	}
	if err := validAddress(id, address); err != nil {
		return Node{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.forget()
	now := r.cfg.Now()
	rec, err := r.record(id)
	switch {
	case errors.Is(err, ErrUnknownNode):
		rec = record{ID: id, State: Ready, RegisteredAt: now}
	case err != nil:
		return Node{}, err
	case rec.State == Lost:
		return Node{}, fmt.Errorf("%w: node %s was removed as lost (%s); remove its record before it joins again", ErrConflict, id, rec.Reason)
	}
	rec.Address = address
	info.ID = id
	if err := r.cfg.Store.Put(nodesBucket, id, rec); err != nil {
		return Node{}, fmt.Errorf("register node %s: %w", id, err)
	}
	hb := heartbeat{At: now, Info: info}
	if err := r.cfg.Store.Put(heartbeatsBucket, id, hb); err != nil {
		return Node{}, fmt.Errorf("register node %s: %w", id, err)
	}
	r.settle(id, now)
	return r.view(rec, hb, now), nil
}

// Heartbeat records a node's Info. An unreachable node is reachable again
// from it on. A node the registry does not know gets ErrUnknownNode and
// should register (the control plane's store may have been reset); a lost
// one ErrConflict.
func (r *Registry) Heartbeat(id string, info nodeapi.Info) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.record(id)
	if err != nil {
		return err
	}
	if rec.State == Lost {
		return fmt.Errorf("%w: node %s was removed as lost (%s)", ErrConflict, id, rec.Reason)
	}
	now := r.cfg.Now()
	info.ID = id
	hb := heartbeat{At: now, Info: info}
	if err := r.cfg.Store.Put(heartbeatsBucket, id, hb); err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", id, err)
	}
	r.noteHeartbeat(id, hb)
	r.settle(id, now)
	return nil
}

// Get returns one node, from the read cache when it is fresh enough.
func (r *Registry) Get(id string) (Node, error) { return r.get(id, r.fresh()) }

// GetStored returns one node as the store has it now, cache or not: what
// an operator reads (GET /v1/nodes/{id}) must show another replica's
// change at once.
func (r *Registry) GetStored(id string) (Node, error) { return r.get(id, nil) }

func (r *Registry) get(id string, l *listing) (Node, error) {
	if l != nil {
		for _, rec := range l.recs {
			if rec.ID == id {
				return r.view(rec, l.hbs[id], r.cfg.Now()), nil
			}
		}
		// Not in the copy: a node that joined through another replica
		// a moment ago, or none; the store says which.
	}
	rec, err := r.record(id)
	if err != nil {
		return Node{}, err
	}
	hb, err := r.heartbeat(id)
	if err != nil {
		return Node{}, err
	}
	return r.view(rec, hb, r.cfg.Now()), nil
}

// List returns every node, by id, from the read cache when it is fresh
// enough.
func (r *Registry) List() ([]Node, error) { return r.list(r.fresh()) }

// ListStored returns every node as the store has them now (GET /v1/nodes).
func (r *Registry) ListStored() ([]Node, error) { return r.list(nil) }

func (r *Registry) list(l *listing) ([]Node, error) {
	if l == nil {
		var err error
		if l, err = r.load(); err != nil {
			return nil, err
		}
	}
	now := r.cfg.Now()
	out := make([]Node, 0, len(l.recs))
	for _, rec := range l.recs {
		out = append(out, r.view(rec, l.hbs[rec.ID], now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// fresh is the cached read of both buckets if it is younger than
// ReadCacheTTL, else nil. Its contents are never changed, only replaced.
func (r *Registry) fresh() *listing {
	if r.cfg.ReadCacheTTL <= 0 {
		return nil
	}
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	if r.cached == nil || time.Since(r.cached.at) > r.cfg.ReadCacheTTL {
		return nil
	}
	return r.cached
}

// forget drops the cached read: this registry wrote the store.
func (r *Registry) forget() {
	r.cacheMu.Lock()
	r.cached = nil
	r.cacheGen++
	r.cacheMu.Unlock()
}

// noteHeartbeat puts a heartbeat this registry stored into the cached
// read, a copy of it: heartbeats come every few seconds from every node,
// and dropping the whole read for each would leave little cached.
func (r *Registry) noteHeartbeat(id string, hb heartbeat) {
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	r.cacheGen++ // a read in flight may hold the older heartbeat
	if r.cached == nil {
		return
	}
	if _, known := r.cached.hbs[id]; !known {
		r.cached = nil // a node this copy does not know: read again
		return
	}
	hbs := make(map[string]heartbeat, len(r.cached.hbs))
	for k, v := range r.cached.hbs {
		hbs[k] = v
	}
	hbs[id] = hb
	r.cached = &listing{at: r.cached.at, recs: r.cached.recs, hbs: hbs}
}

// load reads both buckets, and keeps the read when ReadCacheTTL is set.
func (r *Registry) load() (*listing, error) {
	r.cacheMu.Lock()
	gen := r.cacheGen
	r.cacheMu.Unlock()
	began := time.Now()
	var recs []record
	err := r.cfg.Store.Each(nodesBucket, func(key string, data []byte) error {
		var rec record
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("decode node %s: %w", key, err)
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	hbs := map[string]heartbeat{}
	err = r.cfg.Store.Each(heartbeatsBucket, func(key string, data []byte) error {
		var hb heartbeat
		if err := json.Unmarshal(data, &hb); err != nil {
			return fmt.Errorf("decode heartbeat of node %s: %w", key, err)
		}
		hbs[key] = hb
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	l := &listing{at: began, recs: recs, hbs: hbs}
	if r.cfg.ReadCacheTTL > 0 {
		r.cacheMu.Lock()
		if r.cacheGen == gen && (r.cached == nil || r.cached.at.Before(began)) {
			r.cached = l
		}
		r.cacheMu.Unlock()
	}
	return l, nil
}

// Cordon stops placing new sandboxes on a ready node; its sandboxes stay.
// Cordoning a cordoned node changes nothing.
func (r *Registry) Cordon(id string) (Node, error) {
	return r.transition(id, func(rec *record) error {
		switch rec.State {
		case Ready, Cordoned:
			rec.State, rec.Reason = Cordoned, "cordoned by an operator"
			return nil
		case Draining:
			return fmt.Errorf("%w: node %s is draining, which already takes no new sandboxes", ErrConflict, id)
		}
		return fmt.Errorf("%w: node %s is %s and cannot be cordoned", ErrConflict, id, rec.State)
	})
}

// Uncordon makes a cordoned or draining node take new sandboxes again; a
// drain in progress is not undone (what moved stays moved).
func (r *Registry) Uncordon(id string) (Node, error) {
	return r.transition(id, func(rec *record) error {
		switch rec.State {
		case Ready, Cordoned, Draining:
			rec.State, rec.Reason = Ready, ""
			return nil
		}
		return fmt.Errorf("%w: node %s is %s and cannot be uncordoned", ErrConflict, id, rec.State)
	})
}

// Drain marks a node draining (it takes no new sandboxes) and starts the
// Drainer, which moves its sandboxes away. Draining a draining node starts
// nothing new.
//
// A node with sandboxes is not drained when no other node is ready to
// take them: the drain could only fail sandbox after sandbox.
func (r *Registry) Drain(id string) (Node, error) {
	if err := r.drainTarget(id); err != nil {
		return Node{}, err
	}
	start := false
	n, err := r.transition(id, func(rec *record) error {
		switch rec.State {
		case Ready, Cordoned:
			rec.State, rec.Reason, start = Draining, "drained by an operator", true
			return nil
		case Draining:
			return nil
		}
		return fmt.Errorf("%w: node %s is %s and cannot be drained", ErrConflict, id, rec.State)
	})
	if err != nil || !start || r.cfg.Drainer == nil {
		return n, err
	}
	if err := r.cfg.Drainer.StartDrain(id); err != nil {
		return n, fmt.Errorf("drain node %s: %w", id, err)
	}
	return n, nil
}

// drainTarget refuses the drain of node id when it runs sandboxes and no
// other node is ready. An unknown id passes: the transition reports it.
func (r *Registry) drainTarget(id string) error {
	nodes, err := r.ListStored()
	if err != nil {
		return err
	}
	var self *Node
	for i, n := range nodes {
		switch {
		case n.ID == id:
			self = &nodes[i]
		case n.Schedulable():
			return nil
		}
	}
	if self == nil || self.Info.Sandboxes == 0 || self.State == Draining {
		return nil
	}
	return fmt.Errorf("%w: node %s runs %d sandboxes and no other node is ready to take them; add a node first, or cordon this one", ErrConflict, id, self.Info.Sandboxes)
}

// NoteDrain records in a draining node's reason how its drain went (the
// Drainer's report); a node that left draining meanwhile (uncordoned,
// removed as lost) keeps its own.
func (r *Registry) NoteDrain(id, reason string) error {
	_, err := r.transition(id, func(rec *record) error {
		if rec.State == Draining {
			rec.Reason = reason
		}
		return nil
	})
	return err
}

// Remove takes a node out of the registry. A node that runs no sandboxes
// (by its last heartbeat and this replica's placements since), or a lost
// one, is deleted: removed is true. A
// node with sandboxes is refused unless force, which marks it lost with
// the reason, writing its sandboxes off; its record stays so that they can
// say where they were, and a second Remove deletes it.
//
// A node whose process still runs registers again after a delete: stop it
// first.
func (r *Registry) Remove(id string, force bool) (n Node, removed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.forget()
	rec, err := r.record(id)
	if err != nil {
		return Node{}, false, err
	}
	hb, err := r.heartbeat(id)
	if err != nil {
		return Node{}, false, err
	}
	now := r.cfg.Now()
	n = r.view(rec, hb, now)
	// Placements its heartbeats do not count yet are sandboxes too.
	sandboxes := hb.Info.Sandboxes
	for _, res := range r.reservations {
		if res.node == id {
			sandboxes++
		}
	}
	switch {
	case rec.State == Lost || sandboxes == 0:
		if err := r.cfg.Store.Delete(heartbeatsBucket, id); err != nil {
			return Node{}, false, fmt.Errorf("remove node %s: %w", id, err)
		}
		if err := r.cfg.Store.Delete(nodesBucket, id); err != nil {
			return Node{}, false, fmt.Errorf("remove node %s: %w", id, err)
		}
		r.dropReservations(id)
		return n, true, nil
	case !force:
		return Node{}, false, fmt.Errorf("%w: node %s has %d sandboxes; drain it first, or remove it with force (force=true; space node remove --force) to write them off as lost",
			ErrConflict, id, sandboxes)
	}
	rec.State = Lost
	rec.Reason = fmt.Sprintf("removed with force at %s while %s with %d sandboxes", now.UTC().Format(time.RFC3339), n.State, sandboxes)
	if err := r.cfg.Store.Put(nodesBucket, id, rec); err != nil {
		return Node{}, false, fmt.Errorf("remove node %s: %w", id, err)
	}
	r.dropReservations(id)
	return r.view(rec, hb, now), false, nil
}

// transition applies change to a node's record under mu and stores it.
func (r *Registry) transition(id string, change func(*record) error) (Node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.forget()
	rec, err := r.record(id)
	if err != nil {
		return Node{}, err
	}
	if err := change(&rec); err != nil {
		return Node{}, err
	}
	if err := r.cfg.Store.Put(nodesBucket, id, rec); err != nil {
		return Node{}, fmt.Errorf("update node %s: %w", id, err)
	}
	hb, err := r.heartbeat(id)
	if err != nil {
		return Node{}, err
	}
	return r.view(rec, hb, r.cfg.Now()), nil
}

func (r *Registry) record(id string) (record, error) {
	var rec record
	err := r.cfg.Store.Get(nodesBucket, id, &rec)
	if err != nil && errors.Is(err, store.ErrNotFound) {
		return rec, fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	if err != nil {
		return rec, fmt.Errorf("read node %s: %w", id, err)
	}
	return rec, nil
}

// heartbeat reads a node's last heartbeat; a node without one (its
// registration was interrupted between the two writes) has the zero one,
// and reads unreachable.
func (r *Registry) heartbeat(id string) (heartbeat, error) {
	var hb heartbeat
	err := r.cfg.Store.Get(heartbeatsBucket, id, &hb)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return hb, fmt.Errorf("read heartbeat of node %s: %w", id, err)
	}
	return hb, nil
}

// view is the node as reported at now: unreachable when its last heartbeat
// is older than the timeout, whatever an operator set (but lost).
func (r *Registry) view(rec record, hb heartbeat, now time.Time) Node {
	n := Node{
		ID: rec.ID, Address: rec.Address, State: rec.State, Reason: rec.Reason,
		RegisteredAt: rec.RegisteredAt, LastHeartbeat: hb.At, Info: hb.Info,
	}
	if n.Info.ID == "" {
		n.Info.ID = rec.ID
	}
	if rec.State != Lost && now.Sub(hb.At) > r.cfg.HeartbeatTimeout {
		n.State = Unreachable
		silent := "no heartbeat received"
		if !hb.At.IsZero() {
			silent = fmt.Sprintf("no heartbeat for %s", now.Sub(hb.At).Truncate(time.Second))
		}
		if rec.State != Ready {
			silent += " (" + string(rec.State) + ")"
		}
		n.Reason = silent
	}
	return n
}
