package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// Several control-plane replicas may share one PostgreSQL store. The store
// is then the authority over sandbox records and cp.sandboxes a cache of
// it, refreshed from the store's change notifications; an operation on a
// sandbox holds the store's lock "sandbox/<id>" (recordLock) and starts
// from the record as stored. With bbolt the process is the only writer:
// the cache is the truth and none of this costs a store read.

// leaderLease is the lease whose holder runs the background loops.
const leaderLease = "controlplane-leader"

// defaultLeaseTTL is how long a lease outlives its holder's last renewal:
// another replica takes over within about that.
const defaultLeaseTTL = 6 * time.Second

// recordLock serialises operations on one sandbox: within the process
// (its mutex) and, on a shared store, across replicas (the store's lock of
// the sandbox, taken after the mutex so a replica's own callers queue
// without holding a database connection each). Taking it on a shared
// store reloads the record, so the holder acts on what the last holder,
// on whichever replica, wrote.
type recordLock struct {
	mu sync.Mutex
	// cp and r are set when the record enters the cache (bind); an
	// unbound lock is the mutex alone.
	cp      atomic.Pointer[ControlPlane]
	r       atomic.Pointer[record]
	release func() // the store lock's, while held (guarded by mu)
}

func (l *recordLock) Lock() {
	l.mu.Lock()
	l.lockShared()
}

// TryLock takes the lock only if no one holds it, in this process or, on
// a shared store, on another replica (which it waits for briefly).
func (l *recordLock) TryLock() bool {
	if !l.mu.TryLock() {
		return false
	}
	cp, r := l.cp.Load(), l.r.Load()
	if cp == nil || !cp.shared {
		return true
	}
	cp.mu.Lock()
	id := r.ID
	cp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	unlock, err := cp.cfg.Store.Lock(ctx, "sandbox/"+id)
	if err != nil {
		l.mu.Unlock()
		return false
	}
	l.release = unlock
	cp.reload(r)
	return true
}

// tryLocal takes the mutex only if it is free; lockShared completes it.
func (l *recordLock) tryLocal() bool { return l.mu.TryLock() }

// lockShared takes the cross-replica part of the lock, with l.mu held. A
// store that cannot be reached is retried: an operation must not run
// unserialised.
func (l *recordLock) lockShared() {
	cp, r := l.cp.Load(), l.r.Load()
	if cp == nil || !cp.shared {
		return
	}
	cp.mu.Lock()
	id := r.ID
	cp.mu.Unlock()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		unlock, err := cp.cfg.Store.Lock(context.Background(), "sandbox/"+id)
		if err == nil {
			l.release = unlock
			break
		}
		cp.log.Error("lock sandbox across replicas; retrying", "sandbox", id, "err", err)
		time.Sleep(delay)
	}
	cp.reload(r)
}

func (l *recordLock) Unlock() {
	if release := l.release; release != nil {
		l.release = nil
		release()
	}
	l.mu.Unlock()
}

// bind ties r's lock to cp. cp.mu is held.
func (cp *ControlPlane) bind(r *record) {
	if r.lock.cp.Load() == nil {
		r.lock.r.Store(r)
		r.lock.cp.Store(cp)
	}
}

// stored is the cache's record of s as read from the store.
func (cp *ControlPlane) stored(s Sandbox) *record {
	r := &record{Sandbox: s, persisted: true}
	cp.bind(r)
	return r
}

// newReplicaID names a replica that was not given a name.
func newReplicaID() string { return "cp-" + newToken()[:12] }

// ReplicaID is the name this replica holds its leases under.
func (cp *ControlPlane) ReplicaID() string { return cp.replicaID }

// Leading reports whether this replica holds the leader lease now, and so
// runs the background loops.
func (cp *ControlPlane) Leading() bool { return cp.leading.Load() }

// transitional states are those an operation in progress holds a sandbox
// in; the replica that owns it (Sandbox.Owner) finishes it, or, if that
// replica dies, the leader does.
func transitional(state string) bool {
	switch state {
	case apiv1.StateStarting, apiv1.StatePausing, apiv1.StateSuspending, apiv1.StateResuming,
		apiv1.StateSnapshotting, apiv1.StateStopping:
		return true
	}
	return false
}

// reload replaces r's cached copy with the stored record. A record gone
// from the store (another replica forgot it) leaves the cache, and r is
// marked stopped so that an operation already holding it does nothing.
func (cp *ControlPlane) reload(r *record) {
	cp.mu.Lock()
	id, gen := r.ID, r.gen
	cp.mu.Unlock()
	var s Sandbox
	err := cp.cfg.Store.Get(sandboxBucket, id, &s)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		cp.log.Warn("reload sandbox", "sandbox", id, "err", err)
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if r.gen != gen {
		return // this replica wrote it meanwhile: that is newer
	}
	if err != nil {
		if !r.persisted {
			return // being created here: not in the store yet
		}
		r.State, r.Reason = apiv1.StateStopped, "deleted"
		if cp.sandboxes[id] == r {
			delete(cp.sandboxes, id)
		}
	} else {
		assignStored(r, s)
	}
	cp.wake()
}

// assignStored replaces r's fields with the stored record's, writing only
// those that differ: code that holds r (its lock, or having just written
// it) reads some fields without cp.mu, and the notification of this
// replica's own write, which changes nothing, must not race with that.
// cp.mu is held.
func assignStored(r *record, s Sandbox) {
	dst, src := reflect.ValueOf(&r.Sandbox).Elem(), reflect.ValueOf(s)
	for i := range dst.NumField() {
		if !reflect.DeepEqual(dst.Field(i).Interface(), src.Field(i).Interface()) {
			dst.Field(i).Set(src.Field(i))
		}
	}
}

// refresh brings the cache entry of id up to date with the store, adding
// a record another replica created.
func (cp *ControlPlane) refresh(id string) {
	cp.mu.Lock()
	r, ok := cp.sandboxes[id]
	cp.mu.Unlock()
	if ok {
		cp.reload(r)
		return
	}
	var s Sandbox
	if err := cp.cfg.Store.Get(sandboxBucket, id, &s); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			cp.log.Warn("refresh sandbox", "sandbox", id, "err", err)
		}
		return
	}
	cp.adopt(s)
}

// adopt puts a stored record into the cache unless one is there already,
// and returns the cached one.
func (cp *ControlPlane) adopt(s Sandbox) *record {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if r, ok := cp.sandboxes[s.ID]; ok {
		return r
	}
	r := cp.stored(s)
	cp.sandboxes[s.ID] = r
	cp.wake()
	return r
}

// resync reloads every record: what the store holds now replaces the
// cache, whose entries the store no longer has leave it. It fails only
// when the store cannot be read; the cache is then as it was.
func (cp *ControlPlane) resync() error {
	// A record this replica writes while the bucket is read is newer than
	// what the read returns for it.
	cp.mu.Lock()
	gens := make(map[*record]uint64, len(cp.sandboxes))
	for _, r := range cp.sandboxes {
		gens[r] = r.gen
	}
	cp.mu.Unlock()
	all, err := store.All[Sandbox](cp.cfg.Store, sandboxBucket)
	if err != nil {
		cp.log.Warn("reload sandboxes", "err", err)
		return fmt.Errorf("reload sandboxes: %w", err)
	}
	stored := make(map[string]bool, len(all))
	for _, s := range all {
		stored[s.ID] = true
		cp.mu.Lock()
		r, ok := cp.sandboxes[s.ID]
		cp.mu.Unlock()
		if !ok {
			cp.adopt(s)
			continue
		}
		cp.mu.Lock()
		if gen, seen := gens[r]; r.persisted && seen && gen == r.gen {
			assignStored(r, s)
		}
		cp.mu.Unlock()
	}
	cp.mu.Lock()
	var gone []*record
	for id, r := range cp.sandboxes {
		if !stored[id] && r.persisted {
			gone = append(gone, r)
		}
	}
	cp.mu.Unlock()
	for _, r := range gone {
		cp.reload(r) // confirms, record by record, against a write just made
	}
	cp.mu.Lock()
	cp.wake()
	cp.mu.Unlock()
	return nil
}

// wake tells waiters that a record changed. cp.mu is held.
func (cp *ControlPlane) wake() {
	close(cp.changed)
	cp.changed = make(chan struct{})
}

// followStore keeps the cache in step with other replicas' writes until
// ctx ends; it returns at once on a store no one else writes.
func (cp *ControlPlane) followStore(ctx context.Context) {
	if !cp.shared {
		return
	}
	store.Follow(ctx, cp.cfg.Store, sandboxBucket, func() { _ = cp.resync() }, cp.refresh,
		func(err error) { cp.log.Warn("watch sandbox records", "err", err) })
}

// lease keeps renewing the lease name for this replica, at a third of
// its ttl, until ctx ends, and keeps held true exactly while the lease is
// surely still this replica's: from a successful renewal until ttl after
// that renewal began. onChange is called with each change of held. On a
// clean end the lease is given up at once.
func (cp *ControlPlane) lease(ctx context.Context, name string, held *atomic.Bool, onChange func(bool)) {
	ttl := cp.leaseTTL()
	set := func(v bool) {
		if held.Swap(v) != v && onChange != nil {
			onChange(v)
		}
	}
	var validUntil time.Time
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		began := time.Now()
		ok, err := cp.cfg.Store.TryLead(ctx, name, cp.replicaID, ttl)
		switch {
		case err != nil && ctx.Err() == nil:
			cp.log.Warn("renew lease", "lease", name, "err", err)
		case err == nil && ok:
			validUntil = began.Add(ttl)
		case err == nil:
			validUntil = time.Time{}
		}
		set(time.Now().Before(validUntil))
		select {
		case <-ctx.Done():
			set(false)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := cp.cfg.Store.Resign(rctx, name, cp.replicaID); err != nil {
				cp.log.Warn("resign lease", "lease", name, "err", err)
			}
			cancel()
			return
		case <-tick.C:
			// A renewal that hangs past validUntil must not let this
			// replica act on: the check at the next tick comes first.
			set(time.Now().Before(validUntil))
		}
	}
}

// ownerAlive reports whether the replica owner still renews its liveness
// lease. An expired one is taken for a moment (that is how the store
// tells) and given back.
func (cp *ControlPlane) ownerAlive(ctx context.Context, owner string) (bool, error) {
	if owner == cp.replicaID {
		return true, nil
	}
	if owner == "" {
		return false, nil
	}
	name := "replica/" + owner
	free, err := cp.cfg.Store.TryLead(ctx, name, cp.replicaID, time.Second)
	if err != nil || !free {
		return true, err
	}
	return false, cp.cfg.Store.Resign(ctx, name, cp.replicaID)
}

// adoptOrphans finishes the transitions that replicas which died left
// behind: a record in a transitional state whose owner no longer renews
// its liveness lease is claimed by this replica (the leader) and
// reconciled with its node as after a restart (recoverOne). Only on a
// shared store: with one process Recover did this at start.
func (cp *ControlPlane) adoptOrphans(ctx context.Context) {
	cp.mu.Lock()
	var candidates []*record
	for _, r := range cp.sandboxes {
		if transitional(r.State) && r.Owner != cp.replicaID && r.persisted {
			candidates = append(candidates, r)
		}
	}
	cp.mu.Unlock()
	rec := &reconcile{copies: map[Source][]*record{}, starts: map[*record]nodeapi.TemplateSpec{}}
	for _, r := range candidates {
		if ctx.Err() != nil {
			break
		}
		cp.adoptOrphan(ctx, r, rec)
	}
	cp.restartRecovered(rec)
}

// adoptOrphan claims and reconciles r if its owner is dead, under the
// sandbox's lock (so that two leaders, one of them stale, cannot both).
func (cp *ControlPlane) adoptOrphan(ctx context.Context, r *record, rec *reconcile) {
	r.lock.Lock()
	defer r.lock.Unlock()
	s := cp.snapshot(r)
	if !transitional(s.State) || s.Owner == cp.replicaID {
		return
	}
	if alive, err := cp.ownerAlive(ctx, s.Owner); alive || err != nil {
		if err != nil {
			cp.log.Warn("check replica liveness", "replica", s.Owner, "err", err)
		}
		return
	}
	if err := cp.update(r, func(s *Sandbox) { s.Owner = cp.replicaID }); err != nil {
		cp.log.Error("claim sandbox", "sandbox", s.ID, "err", err)
		return
	}
	cp.log.Info("taking over a transition of a replica that died", "sandbox", s.ID, "state", s.State)
	cp.recordEvent(s.ID, Event{Time: time.Now().UTC(), Type: "takeover",
		Message: "the control-plane replica that was " + s.State + " it stopped; " + cp.replicaID + " finishes"})
	cp.recoverLocked(ctx, r, rec, "recovery after its control-plane replica died failed: ")
}

// recoverLocked reconciles r with its node (recoverOne) with r.lock held,
// failing it with failPrefix and the error if that fails. A node that
// cannot be reached leaves the record as it is, for a later attempt.
func (cp *ControlPlane) recoverLocked(ctx context.Context, r *record, rec *reconcile, failPrefix string) {
	s := cp.snapshot(r)
	n, err := cp.nodeOf(s)
	if err != nil {
		cp.log.Warn("recover sandbox", "sandbox", s.ID, "err", err)
		return
	}
	if err := cp.recoverOne(ctx, n, r, rec); err != nil {
		cp.log.Error("recover sandbox", "sandbox", s.ID, "state", s.State, "err", err)
		cp.fail(ctx, r, failPrefix+err.Error())
	}
}

// restartRecovered runs again the starts and copies recoverOne queued,
// once the records' locks are released.
func (cp *ControlPlane) restartRecovered(rec *reconcile) {
	for r, tpl := range rec.starts {
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			n, err := cp.nodeOf(s)
			if err != nil {
				return err
			}
			return n.Create(ctx, nodeapi.CreateRequest{Spec: cp.createSpec(s, tpl)})
		})
	}
	for src, rs := range rec.copies {
		cp.restartCopies(src, rs)
	}
}

// recoverShared starts Recover on a shared store: it loads the records
// into the cache and reports whether this replica should also reconcile
// them with the node, which it should when it can take the leader lease
// (no replica leads: it is the first, or `space serve` on PostgreSQL
// restarting). Otherwise the leader is alive and finishes what dead
// replicas left (adoptOrphans), and the node is in use by the others.
func (cp *ControlPlane) recoverShared(ctx context.Context) bool {
	all, err := store.All[Sandbox](cp.cfg.Store, sandboxBucket)
	if err != nil {
		cp.log.Error("load sandbox records", "err", err)
		return false
	}
	for _, s := range all {
		cp.adopt(s)
	}
	lead, err := cp.cfg.Store.TryLead(ctx, leaderLease, cp.replicaID, cp.leaseTTL())
	if err != nil {
		cp.log.Warn("take the leader lease to recover", "err", err)
	}
	if lead {
		// Until Run's renewals take over: ReconcileNode, which Recover
		// calls next, is the leader's.
		cp.leading.Store(true)
	} else {
		cp.recoverOwn(ctx, all)
	}
	return lead
}

// recoverOwn finishes the transitions this replica's previous run (by its
// name, LoadReplicaID) left: the leader takes those of dead replicas only,
// and this one is alive again.
func (cp *ControlPlane) recoverOwn(ctx context.Context, all []Sandbox) {
	rec := &reconcile{copies: map[Source][]*record{}, starts: map[*record]nodeapi.TemplateSpec{}}
	for _, s := range all {
		if !transitional(s.State) || s.Owner != cp.replicaID {
			continue
		}
		r, err := cp.lookup(s.ID)
		if err != nil {
			continue
		}
		r.lock.Lock()
		cp.recoverLocked(ctx, r, rec, "recovery failed: ")
		r.lock.Unlock()
	}
	cp.restartRecovered(rec)
}

func (cp *ControlPlane) leaseTTL() time.Duration {
	if cp.cfg.LeaseTTL > 0 {
		return cp.cfg.LeaseTTL
	}
	return defaultLeaseTTL
}

// LoadReplicaID returns the replica name kept in the file at path,
// creating it with a new name the first time. A replica restarted with its
// data directory keeps its name, so it renews its own leases at once
// instead of waiting for them to expire, and recovers its own unfinished
// transitions like any restart.
func LoadReplicaID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(data)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read replica id: %w", err)
	}
	id := newReplicaID()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write replica id: %w", err)
	}
	return id, nil
}

// activityBucket holds, per replica, when the sandboxes it served were
// last active; the leader's idle suspend merges them with its own view.
const activityBucket = "replica_activity"

// activityWindow is how far back a replica shares activity: what is older
// the leader has already merged.
const activityWindow = time.Minute

// shareActivity publishes this replica's recent activity every second
// until ctx ends, so that a sandbox used only through another replica is
// not suspended as idle by the leader.
func (cp *ControlPlane) shareActivity(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			_ = cp.cfg.Store.Delete(activityBucket, cp.replicaID)
			return
		case <-tick.C:
		}
		now := time.Now()
		recent := map[string]time.Time{}
		newest := last
		cp.mu.Lock()
		for id, t := range cp.lastActive {
			if now.Sub(t) < activityWindow {
				recent[id] = t.UTC()
			}
			if t.After(newest) {
				newest = t
			}
		}
		cp.mu.Unlock()
		if !newest.After(last) {
			continue // nothing new since the last write
		}
		if err := cp.cfg.Store.Put(activityBucket, cp.replicaID, recent); err != nil {
			cp.log.Warn("share sandbox activity", "err", err)
			continue
		}
		last = newest
	}
}

// mergeActivity folds the other replicas' shared activity into
// lastActive, for the leader's idle suspend.
func (cp *ControlPlane) mergeActivity() {
	all, err := store.All[map[string]time.Time](cp.cfg.Store, activityBucket)
	if err != nil {
		cp.log.Warn("read shared sandbox activity", "err", err)
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, m := range all {
		for id, t := range m {
			if _, live := cp.sandboxes[id]; live && t.After(cp.lastActive[id]) {
				cp.lastActive[id] = t
			}
		}
	}
}
