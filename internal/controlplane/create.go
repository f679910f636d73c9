package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/pkg/apiv1"
)

// Limits on what one request may carry.
const (
	maxTimeoutS    = 30 * 24 * 3600
	maxEnvEntries  = 512
	maxEnvKeyLen   = 1024
	maxEnvValueLen = 128 << 10 // Linux's MAX_ARG_STRLEN: the most execve takes
	maxMetaEntries = 64
	maxMetaKeyLen  = 256
	maxMetaValLen  = 2048
	createTimeout  = 3 * time.Minute
)

// DefaultMinSnapshotInterval is the floor of rolling snapshots' interval
// unless the operator sets another (Defaults.MinSnapshotInterval).
const DefaultMinSnapshotInterval = time.Minute

// minSnapshotIntervalS is the floor of snapshot_interval_s, in seconds.
func (d Defaults) minSnapshotIntervalS() int {
	if d.MinSnapshotInterval <= 0 {
		return int(DefaultMinSnapshotInterval / time.Second)
	}
	return int((d.MinSnapshotInterval + time.Second - 1) / time.Second)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Create validates a request, records the sandbox as starting and starts it
// in the background, from a template or from a snapshot. The returned
// sandbox is in state starting. It belongs to the scope's project; the
// template, snapshot and secrets it names must be ones the scope sees.
func (cp *ControlPlane) Create(scope project.Scope, req apiv1.CreateSandboxRequest) (Sandbox, error) {
	if req.Snapshot != "" {
		return cp.createFromSnapshot(scope, req)
	}
	if req.Template == "" {
		req.Template = cp.cfg.Defaults.Template
	}
	if err := cp.checkRequest(scope.Owner(), &req); err != nil {
		return Sandbox{}, err
	}
	if len(req.VolumeMounts) > 0 {
		return cp.createMounting(scope, req)
	}
	tpl, tplName, err := cp.cfg.Templates.Resolve(scope, req.Template)
	if err != nil {
		return Sandbox{}, err
	}
	if err := chooseRuntime(&req, tpl, tplName); err != nil {
		return Sandbox{}, err
	}
	if err := cp.allowCreates(scope.Owner(), 1); err != nil {
		return Sandbox{}, err
	}
	d := cp.cfg.Defaults
	nodeID, err := cp.place(cluster.PlaceRequest{
		Template: tpl.ID, VCPUs: req.VCPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Runtime: req.Runtime,
		// The pools hold sandboxes with the default limits (poolRequest).
		Pooled: req.VCPUs == d.VCPUs && req.MemoryMB == d.MemoryMB && req.DiskMB == d.DiskMB,
	})
	if err != nil {
		return Sandbox{}, err
	}
	n, err := cp.node(nodeID, "")
	if err != nil {
		return Sandbox{}, err
	}
	isolation, err := cp.isolation(nodeID, req.Runtime)
	if err != nil {
		return Sandbox{}, err
	}
	// Pools are of the template's default backend, whose image they are
	// restored from.
	if req.Runtime == tpl.DefaultRuntime() {
		if sb, ok, err := cp.createPooled(scope.Owner(), nodeID, n, req, tpl, tplName, isolation); ok {
			return sb, err
		}
	}
	r, err := cp.admit(scope.Owner(), req, tplName, tpl.ID, func(s *Sandbox) { s.Node, s.Isolation = nodeID, isolation })
	if err != nil {
		return Sandbox{}, err
	}
	cp.launch(r, func(ctx context.Context, s Sandbox) error { return cp.startFromTemplate(ctx, n, s, tpl) })
	return cp.snapshot(r), nil
}

// chooseRuntime settles the backend a create from tpl runs on: the one
// asked for, which the template must have been built for, or the
// template's default.
func chooseRuntime(req *apiv1.CreateSandboxRequest, tpl nodeapi.TemplateSpec, tplName string) error {
	if req.Runtime == "" {
		req.Runtime = tpl.DefaultRuntime()
		return nil
	}
	if err := runtime.CheckName(req.Runtime); err != nil {
		return invalid("runtime: %v", err)
	}
	if !tpl.HasRuntime(req.Runtime) {
		return invalid("runtime: template %s has no %s runtime (it has %s)", tplName, req.Runtime, strings.Join(tpl.RuntimeNames(), ", "))
	}
	return nil
}

// isolation is what backend rt of node nodeID isolates with, as the node
// reports it; a node without rt refuses here, before anything is
// recorded.
func (cp *ControlPlane) isolation(nodeID, rt string) (string, error) {
	runtimes, err := cp.cfg.Nodes.Runtimes(nodeID)
	if err != nil {
		return "", fmt.Errorf("create sandbox: node %s: %w", cp.nodeID(nodeID), err)
	}
	if len(runtimes) == 0 && rt == runtime.GVisor {
		return runtime.IsolationGVisor, nil // a node from before the choice
	}
	iso, ok := runtimes[rt]
	if !ok {
		return "", fmt.Errorf("%w: node %s has no %s runtime", cluster.ErrConflict, cp.nodeID(nodeID), rt)
	}
	return iso, nil
}

// place chooses the node of a new sandbox. A refusal wraps ErrCapacity
// too, so that it is answered as serve answers a full node.
func (cp *ControlPlane) place(req cluster.PlaceRequest) (string, error) {
	if req.Node != "" {
		req.Node = cp.nodeID(req.Node) // a volume's record may name serve's node by its old name
	}
	id, err := cp.cfg.Nodes.Place(req)
	if errors.Is(err, cluster.ErrNoCapacity) {
		return "", fmt.Errorf("%w: %w", ErrCapacity, err)
	}
	if err != nil {
		return "", fmt.Errorf("place sandbox: %w", err)
	}
	return id, nil
}

// startFromTemplate restores the template's pre-booted image on n (the
// node boots the template when no image can be had).
func (cp *ControlPlane) startFromTemplate(ctx context.Context, n Node, s Sandbox, tpl nodeapi.TemplateSpec) error {
	return n.Create(ctx, nodeapi.CreateRequest{Spec: cp.createSpec(s, tpl), Warm: true, Identity: *cp.identity(s)})
}

// createSpec is what the node needs to start s from tpl.
func (cp *ControlPlane) createSpec(s Sandbox, tpl nodeapi.TemplateSpec) nodeapi.CreateSpec {
	return nodeapi.CreateSpec{
		ID: s.ID, Template: tpl, Env: s.Env, AccessToken: s.AccessToken, DiskMB: s.DiskMB, Limits: cp.limits(s),
		Network: s.policy(), Mounts: nodeMounts(s.Mounts), Runtime: s.RuntimeName(),
	}
}

// poolLimits are the limits a request asks for, in the pool's terms.
func (cp *ControlPlane) poolLimits(vcpus, memoryMB, diskMB int) nodeapi.PoolLimits {
	return nodeapi.PoolLimits{
		Limits: runtime.Limits{VCPUs: vcpus, MemoryMB: memoryMB, Pids: cp.cfg.Defaults.Pids},
		DiskMB: diskMB,
	}
}

// createPooled serves a create from the template's warm pool on node n
// (nodeID): the node gives the claimed sandbox its identity and network, so it is running when
// this returns. ok is false when no pooled sandbox matched or the claim
// failed (the node released that sandbox); the caller starts one instead.
func (cp *ControlPlane) createPooled(owner, nodeID string, n Node, req apiv1.CreateSandboxRequest, tpl nodeapi.TemplateSpec, tplName, isolation string) (Sandbox, bool, error) {
	r := cp.newRecord(owner, req, tplName, tpl.ID, func(s *Sandbox) { s.Node, s.Isolation = nodeID, isolation })
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	// The record's id is the pooled sandbox's; the node adds it to the
	// identity, which is all the identity needs of it.
	claimStart := time.Now()
	res, err := n.Claim(ctx, nodeapi.ClaimRequest{
		TemplateID: tpl.ID, Limits: cp.poolLimits(req.VCPUs, req.MemoryMB, req.DiskMB),
		Identity: *cp.identity(r.Sandbox), Network: r.policy(),
	})
	if err != nil {
		cp.log.Warn("claim of a pooled sandbox failed; starting one instead", "template", tpl.ID, "err", err)
		return Sandbox{}, false, nil
	}
	if !res.Claimed {
		return Sandbox{}, false, nil
	}
	cp.claimLatency.Observe(time.Since(claimStart).Seconds())
	r.ID = res.ID
	if err := cp.admitRecord(r, req, tplName); err != nil {
		_ = n.Destroy(context.Background(), res.ID)
		return Sandbox{}, true, err
	}
	r.lock.Lock()
	defer r.lock.Unlock()
	if err := cp.setState(r, apiv1.StateRunning, ""); err != nil {
		return Sandbox{}, true, err
	}
	cp.createLatency.Observe(time.Since(began).Seconds())
	return cp.snapshot(r), true, nil
}

// createFromSnapshot starts a new sandbox from a snapshot's memory and
// filesystem, with an identity of its own.
func (cp *ControlPlane) createFromSnapshot(scope project.Scope, req apiv1.CreateSandboxRequest) (Sandbox, error) {
	if len(req.VolumeMounts) > 0 {
		return Sandbox{}, invalid("volume_mounts cannot be given with snapshot: a sandbox started from a snapshot mounts the volumes its snapshot's sandbox mounted")
	}
	snap, release, err := cp.holdSnapshot(func() (Snapshot, error) { return cp.ResolveSnapshot(scope, req.Snapshot) },
		"a start of a new sandbox from it")
	if err != nil {
		return Sandbox{}, err
	}
	if err := cp.checkMountsExist(snap.Mounts); err != nil {
		release()
		return Sandbox{}, err
	}
	if err := cp.checkRequest(scope.Owner(), &req); err != nil {
		release()
		return Sandbox{}, err
	}
	if err := cp.allowCreates(scope.Owner(), 1); err != nil {
		release()
		return Sandbox{}, err
	}
	// The snapshot's volume and image are on its node: the new sandbox
	// runs there.
	if _, err := cp.node(snap.Node, ""); err != nil {
		release()
		return Sandbox{}, err
	}
	if req.Runtime != "" && req.Runtime != snap.RuntimeName() {
		release()
		return Sandbox{}, invalid("runtime: snapshot %s was taken under the %s runtime; a sandbox started from it runs on that one (an image of one runtime is never restored by another)", req.Snapshot, snap.RuntimeName())
	}
	req.Runtime = snap.RuntimeName()
	src := snap.source()
	r, err := cp.admit(scope.Owner(), req, snap.Template, snap.TemplateID, func(s *Sandbox) {
		s.Isolation = snap.Isolation
		s.Snapshot = src.Snapshot
		s.Source = &src
		s.Node = snap.Node
		s.Mounts = slices.Clone(snap.Mounts)
	})
	if err != nil {
		release()
		return Sandbox{}, err
	}
	cp.startCopies([]*record{r}, src, release)
	return cp.snapshot(r), nil
}

// admit records a new sandbox of project owner as starting, if the node
// and the project's quota can hold it.
func (cp *ControlPlane) admit(owner string, req apiv1.CreateSandboxRequest, tplName, tplID string, adjust func(*Sandbox)) (*record, error) {
	r := cp.newRecord(owner, req, tplName, tplID, adjust)
	if err := cp.admitRecord(r, req, tplName); err != nil {
		return nil, err
	}
	return r, nil
}

// newRecord is the record of a new sandbox of project owner, not yet
// admitted.
func (cp *ControlPlane) newRecord(owner string, req apiv1.CreateSandboxRequest, tplName, tplID string, adjust func(*Sandbox)) *record {
	now := time.Now().UTC()
	r := &record{Sandbox: Sandbox{
		ID: newID(), Project: project.Of(owner), Template: tplName, TemplateID: tplID, State: apiv1.StateStarting,
		VCPUs: req.VCPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		Env: req.Env, Metadata: req.Metadata, AccessToken: newToken(),
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(req.TimeoutS) * time.Second), TimeoutS: req.TimeoutS,
		Lifecycle: lifecycleOf(req, cp.cfg.Defaults), Runtime: req.Runtime,
	}}
	// checkRequest validated the policy already.
	r.Network, _ = checkNetwork(req.Network)
	r.Traffic = cp.trafficOf(req.Network)
	withCredentials(&r.Sandbox, req.Credentials)
	adjust(&r.Sandbox)
	return r
}

// admitRecord records r as starting, if the node and the project's quota
// can hold it.
func (cp *ControlPlane) admitRecord(r *record, req apiv1.CreateSandboxRequest, tplName string) error {
	now := r.CreatedAt
	cp.mu.Lock()
	if err := cp.checkQuota(r.Project, req.MemoryMB); err != nil {
		cp.mu.Unlock()
		return err
	}
	cp.sandboxes[r.ID] = r
	cp.lastActive[r.ID] = time.Now()
	cp.mu.Unlock()
	if err := cp.update(r, func(*Sandbox) {}); err != nil {
		cp.mu.Lock()
		delete(cp.sandboxes, r.ID)
		cp.mu.Unlock()
		return err
	}
	from := "template " + tplName
	if r.Snapshot != "" {
		from = "snapshot " + r.Snapshot
	}
	if r.BranchOf != "" {
		from = "branch of " + r.BranchOf
	}
	cp.recordEvent(r.ID, Event{Time: now, Type: "state", To: apiv1.StateStarting, Message: "created from " + from})
	return nil
}

// checkRequest fills defaults and rejects what no node could run, for a
// sandbox of project owner.
func (cp *ControlPlane) checkRequest(owner string, req *apiv1.CreateSandboxRequest) error {
	d := cp.cfg.Defaults
	if _, err := checkNetwork(req.Network); err != nil {
		return err
	}
	if err := cp.checkCredentials(owner, req); err != nil {
		return err
	}
	if err := cp.checkTraffic(req.Network); err != nil {
		return err
	}
	if req.VCPUs == 0 {
		req.VCPUs = d.VCPUs
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = d.MemoryMB
	}
	if req.DiskMB == 0 {
		req.DiskMB = d.DiskMB
	}
	if req.TimeoutS == 0 {
		req.TimeoutS = d.TimeoutS
	}
	switch {
	case req.VCPUs < 0:
		return invalid("vcpus must be positive, got %d", req.VCPUs)
	case req.MemoryMB < 0 || (req.MemoryMB > 0 && req.MemoryMB < 32):
		return invalid("memory_mb must be at least 32, got %d", req.MemoryMB)
	case req.DiskMB < 0 || (req.DiskMB > 0 && req.DiskMB < 16):
		return invalid("disk_mb must be at least 16, got %d", req.DiskMB)
	case req.TimeoutS < 0 || req.TimeoutS > maxTimeoutS:
		return invalid("timeout_s must be between 1 and %d, got %d", maxTimeoutS, req.TimeoutS)
	case req.OnTimeout != "" && req.OnTimeout != "kill" && req.OnTimeout != "suspend":
		return invalid("on_timeout must be kill or suspend, got %q", req.OnTimeout)
	case req.IdleSuspendS < -1:
		return invalid("idle_suspend_s must be -1 (never), 0 (default) or positive")
	case req.SnapshotIntervalS < 0 || (req.SnapshotIntervalS > 0 && req.SnapshotIntervalS < d.minSnapshotIntervalS()):
		return invalid("snapshot_interval_s must be 0 (no rolling snapshots) or at least %d seconds, got %d",
			d.minSnapshotIntervalS(), req.SnapshotIntervalS)
	case req.SnapshotRetentionS < 0:
		return invalid("snapshot_retention_s must not be negative")
	}
	if err := CheckEnv(req.Env); err != nil {
		return err
	}
	return CheckMetadata(req.Metadata)
}

// CheckEnv rejects environment variables that execve could not pass on or
// that would change their meaning: names with "=" or NUL, values with NUL,
// text that is not UTF-8, and sizes past the limits. Every request that
// carries env (create, exec, sessions) is checked with it.
func CheckEnv(env map[string]string) error {
	if len(env) > maxEnvEntries {
		return invalid("at most %d env entries, got %d", maxEnvEntries, len(env))
	}
	for k, v := range env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00") || !utf8.ValidString(k):
			return invalid("env name %q is not a valid variable name (non-empty UTF-8 without \"=\" or NUL)", k)
		case len(k) > maxEnvKeyLen:
			return invalid("env name %.32q... is longer than %d bytes", k, maxEnvKeyLen)
		case strings.ContainsRune(v, 0) || !utf8.ValidString(v):
			return invalid("env %s: values must be UTF-8 without NUL bytes", k)
		case len(v) > maxEnvValueLen:
			return invalid("env %s: value longer than %d bytes", k, maxEnvValueLen)
		}
	}
	return nil
}

// CheckMetadata bounds a sandbox's metadata (tags): at most maxMetaEntries
// entries, keys of 1 to maxMetaKeyLen bytes, values of at most
// maxMetaValLen bytes, all UTF-8 without NUL.
func CheckMetadata(md map[string]string) error {
	if len(md) > maxMetaEntries {
		return invalid("at most %d metadata entries, got %d", maxMetaEntries, len(md))
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > maxMetaKeyLen:
			return invalid("metadata keys must be 1 to %d bytes", maxMetaKeyLen)
		case len(v) > maxMetaValLen:
			return invalid("metadata %s: value longer than %d bytes", k, maxMetaValLen)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) || !utf8.ValidString(k) || !utf8.ValidString(v):
			return invalid("metadata keys and values must be UTF-8 without NUL bytes")
		}
	}
	return nil
}

// launch runs the node's part of a start in the background and records the
// outcome. The sandbox's lock is held until it finishes, so later operations
// queue behind it; Delete cancels it.
func (cp *ControlPlane) launch(r *record, act func(ctx context.Context, s Sandbox) error) {
	r.lock.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	cp.mu.Lock()
	r.cancelStart = cancel
	cp.mu.Unlock()
	go func() {
		defer r.lock.Unlock()
		defer func() {
			cp.mu.Lock()
			r.cancelStart()
			r.cancelStart = nil
			cp.mu.Unlock()
		}()
		began := time.Now()
		s := cp.snapshot(r)
		sweep := cp.nodeSweep(cp.nodeID(s.Node))
		sweep.RLock()
		err := act(ctx, s)
		sweep.RUnlock()
		if err != nil {
			cp.log.Warn("sandbox failed to start", "sandbox", s.ID, "err", err)
			cp.fail(context.WithoutCancel(ctx), r, "start failed: "+err.Error())
			return
		}
		crashpoint.Hit("start-ran")
		if err := cp.setState(r, apiv1.StateRunning, ""); err != nil {
			cp.log.Error("record running", "sandbox", s.ID, "err", err)
			return
		}
		cp.createLatency.Observe(time.Since(began).Seconds())
	}()
}

// Delete stops a sandbox, releases everything it holds and forgets it.
func (cp *ControlPlane) Delete(ctx context.Context, id string) error {
	r, err := cp.lookup(id)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	if r.cancelStart != nil {
		r.cancelStart()
	}
	cp.mu.Unlock()
	r.lock.Lock()
	defer r.lock.Unlock()
	if err := cp.stop(ctx, r, "deleted"); err != nil {
		return err
	}
	return cp.forget(r.ID)
}

// stop destroys the sandbox on the node and records it stopped. r.lock is held.
func (cp *ControlPlane) stop(ctx context.Context, r *record, reason string) error {
	s := cp.snapshot(r)
	if s.State == apiv1.StateStopped {
		return nil
	}
	n, err := cp.nodeOf(s)
	if err != nil {
		return err
	}
	if err := cp.setState(r, apiv1.StateStopping, reason); err != nil {
		return err
	}
	crashpoint.Hit("stop-recorded")
	if err := n.Destroy(ctx, s.ID); err != nil {
		if errors.Is(err, ErrNodeUnavailable) {
			// The node went away under the stop: the sandbox stays
			// stopping, and the node's reconcile finishes the stop when
			// it is back (its runtime may well still run there).
			return fmt.Errorf("stop %s: %w", s.ID, err)
		}
		_ = cp.setState(r, apiv1.StateFailed, "stop failed: "+err.Error())
		return fmt.Errorf("stop %s: %w", s.ID, err)
	}
	if err := cp.removeImage(ctx, n, suspendImage(s.ID)); err != nil {
		cp.log.Error("remove suspend image", "sandbox", s.ID, "err", err)
	}
	crashpoint.Hit("stop-destroyed")
	return cp.setState(r, apiv1.StateStopped, reason)
}

func (cp *ControlPlane) forget(id string) error {
	if err := cp.cfg.Store.Delete(sandboxBucket, id); err != nil {
		return fmt.Errorf("forget %s: %w", id, err)
	}
	if err := cp.cfg.Store.Delete(eventBucket, id); err != nil {
		return fmt.Errorf("forget %s: %w", id, err)
	}
	cp.mu.Lock()
	delete(cp.sandboxes, id)
	close(cp.changed)
	cp.changed = make(chan struct{})
	cp.mu.Unlock()
	return nil
}

// SetTimeout makes the sandbox expire timeoutS seconds from now.
func (cp *ControlPlane) SetTimeout(id string, timeoutS int) (Sandbox, error) {
	if timeoutS <= 0 || timeoutS > maxTimeoutS {
		return Sandbox{}, invalid("timeout_s must be between 1 and %d, got %d", maxTimeoutS, timeoutS)
	}
	r, err := cp.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	if s := cp.snapshot(r); terminal(s.State) {
		return s, &StateError{ID: id, State: s.State, Want: "set its timeout"}
	}
	err = cp.update(r, func(s *Sandbox) {
		s.ExpiresAt = time.Now().UTC().Add(time.Duration(timeoutS) * time.Second)
		s.TimeoutS = timeoutS
	})
	return cp.snapshot(r), err
}

// Running returns the data plane of a running sandbox, for agent calls.
// A suspended sandbox is resumed first unless its auto-resume is off.
func (cp *ControlPlane) Running(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	r, err := cp.lookup(id)
	if err != nil {
		return nil, err
	}
	cp.touch(id)
	s := cp.snapshot(r)
	if settling(s) {
		// Traffic that arrives mid-transition waits for its end, as it
		// would have had it come a moment later: a suspend in progress
		// ends suspended (then resumed below), a resume ends running.
		if s, err = cp.waitWhile(ctx, id, settling); err != nil {
			return nil, fmt.Errorf("wait for %s to settle: %w", id, err)
		}
	}
	if s.State == apiv1.StateSuspended && s.Lifecycle.AutoResume {
		r.lock.Lock()
		if cp.snapshot(r).State == apiv1.StateSuspended {
			err = cp.resume(ctx, r)
		}
		r.lock.Unlock()
		if err != nil {
			return nil, fmt.Errorf("auto-resume %s: %w", id, err)
		}
		s = cp.snapshot(r)
	}
	if s.State != apiv1.StateRunning {
		return nil, &StateError{ID: id, State: s.State, Want: "reach its processes or files (it must be running)"}
	}
	n, err := cp.nodeOf(s)
	if err != nil {
		return nil, err
	}
	sb, err := n.Sandbox(ctx, id)
	if errors.Is(err, nodeapi.ErrNoSandbox) {
		return nil, &StateError{ID: id, State: cp.snapshot(r).State, Want: "reach its agent"}
	}
	return sb, err
}

// settling reports whether traffic to s should wait for its transition
// to end: a resume or a snapshot in progress (a rolling snapshot, a
// branch's capture: seconds, after which it runs again), or a suspend in
// progress of a sandbox that auto-resumes (without auto-resume the
// suspended end is refused anyway, so waiting for it would only delay the
// refusal).
func settling(s Sandbox) bool {
	return s.State == apiv1.StateResuming || s.State == apiv1.StateSnapshotting ||
		s.State == apiv1.StateSuspending && s.Lifecycle.AutoResume
}

func sortByCreation(s []Sandbox) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].CreatedAt.Equal(s[j].CreatedAt) {
			return s[i].ID < s[j].ID
		}
		return s[i].CreatedAt.Before(s[j].CreatedAt)
	})
}

// lifecycleOf turns a create request's lifetime settings into a Lifecycle.
func lifecycleOf(req apiv1.CreateSandboxRequest, d Defaults) Lifecycle {
	l := Lifecycle{
		AutoResume: req.AutoResume == nil || *req.AutoResume, OnTimeout: req.OnTimeout,
		IdleSuspendS: req.IdleSuspendS, SnapshotIntervalS: req.SnapshotIntervalS, SnapshotRetentionS: req.SnapshotRetentionS,
	}
	if req.KeepMemory != nil && !*req.KeepMemory {
		keep := false
		l.KeepMemory = &keep
	}
	if l.OnTimeout == "" {
		l.OnTimeout = "kill"
	}
	if l.IdleSuspendS == 0 {
		l.IdleSuspendS = d.IdleSuspendS
	}
	if l.SnapshotIntervalS > 0 && l.SnapshotRetentionS == 0 {
		l.SnapshotRetentionS = int(d.SnapshotRetention.Seconds())
	}
	return l
}
