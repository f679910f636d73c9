package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/pkg/apiv1"
)

// Limits on what one request may carry.
const (
	maxTimeoutS    = 30 * 24 * 3600
	maxEnvEntries  = 512
	maxMetaEntries = 64
	maxMetaLen     = 512
	createTimeout  = 3 * time.Minute
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Create validates a request, records the sandbox as starting and starts it
// in the background. The returned sandbox is in state starting.
func (cp *ControlPlane) Create(req apiv1.CreateSandboxRequest) (Sandbox, error) {
	d := cp.cfg.Defaults
	if req.Template == "" {
		req.Template = d.Template
	}
	if err := cp.checkRequest(&req); err != nil {
		return Sandbox{}, err
	}
	tpl, tplName, err := cp.cfg.Templates.Resolve(req.Template)
	if err != nil {
		return Sandbox{}, err
	}
	now := time.Now().UTC()
	r := &record{Sandbox: Sandbox{
		ID: newID(), Template: tplName, TemplateID: tpl.ID, State: apiv1.StateStarting,
		VCPUs: req.VCPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		Env: req.Env, Metadata: req.Metadata, AccessToken: newToken(),
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(req.TimeoutS) * time.Second),
	}}
	cp.mu.Lock()
	if err := cp.checkCommitment(req.MemoryMB); err != nil {
		cp.mu.Unlock()
		return Sandbox{}, err
	}
	cp.sandboxes[r.ID] = r
	cp.mu.Unlock()
	if err := cp.update(r, func(*Sandbox) {}); err != nil {
		cp.mu.Lock()
		delete(cp.sandboxes, r.ID)
		cp.mu.Unlock()
		return Sandbox{}, err
	}
	cp.recordEvent(r.ID, Event{Time: now, Type: "state", To: apiv1.StateStarting, Message: "created from " + tplName})
	r.lock.Lock() // held until the start finishes, so later operations queue behind it
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	cp.mu.Lock()
	r.cancelStart = cancel
	cp.mu.Unlock()
	go cp.start(ctx, r, tpl)
	return cp.snapshot(r), nil
}

// checkRequest fills defaults and rejects what no node could run.
func (cp *ControlPlane) checkRequest(req *apiv1.CreateSandboxRequest) error {
	d, c := cp.cfg.Defaults, cp.cfg.Capacity
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
	case req.VCPUs > c.VCPUs:
		return fmt.Errorf("%w: requested %d vCPUs, the node has %d", ErrCapacity, req.VCPUs, c.VCPUs)
	case req.MemoryMB < 0 || (req.MemoryMB > 0 && req.MemoryMB < 32):
		return invalid("memory_mb must be at least 32, got %d", req.MemoryMB)
	case req.MemoryMB > c.MemoryMB:
		return fmt.Errorf("%w: requested %d MiB of memory, the node has %d MiB", ErrCapacity, req.MemoryMB, c.MemoryMB)
	case req.DiskMB < 0 || (req.DiskMB > 0 && req.DiskMB < 16):
		return invalid("disk_mb must be at least 16, got %d", req.DiskMB)
	case c.DiskMB > 0 && req.DiskMB > c.DiskMB:
		return fmt.Errorf("%w: requested %d MiB of disk, the node has %d MiB", ErrCapacity, req.DiskMB, c.DiskMB)
	case req.TimeoutS < 0 || req.TimeoutS > maxTimeoutS:
		return invalid("timeout_s must be between 1 and %d, got %d", maxTimeoutS, req.TimeoutS)
	case len(req.Env) > maxEnvEntries:
		return invalid("at most %d env entries", maxEnvEntries)
	case len(req.Metadata) > maxMetaEntries:
		return invalid("at most %d metadata entries", maxMetaEntries)
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return invalid("env name %q is not a valid variable name", k)
		}
	}
	for k, v := range req.Metadata {
		if k == "" || len(k) > maxMetaLen || len(v) > maxMetaLen {
			return invalid("metadata keys must be non-empty and keys and values at most %d bytes", maxMetaLen)
		}
	}
	return nil
}

// checkCommitment refuses a sandbox whose memory limit would push the sum of
// limits past the node's memory times the overcommit factor. cp.mu is held.
func (cp *ControlPlane) checkCommitment(memoryMB int) error {
	c := cp.cfg.Capacity
	if c.MemoryOvercommit <= 0 {
		return nil
	}
	committed := 0
	for _, r := range cp.sandboxes {
		if !terminal(r.State) && r.State != apiv1.StateSuspended {
			committed += r.MemoryMB
		}
	}
	limit := int(float64(c.MemoryMB) * c.MemoryOvercommit)
	if committed+memoryMB > limit {
		return fmt.Errorf("%w: %d MiB of memory already committed to sandboxes, %d MiB more exceeds the node's limit of %d MiB",
			ErrCapacity, committed, memoryMB, limit)
	}
	return nil
}

// start runs the node's part of a create and records the outcome. It is
// called with r.lock held and releases it.
func (cp *ControlPlane) start(ctx context.Context, r *record, tpl node.TemplateSpec) {
	defer r.lock.Unlock()
	defer func() {
		cp.mu.Lock()
		r.cancelStart()
		r.cancelStart = nil
		cp.mu.Unlock()
	}()
	began := time.Now()
	s := cp.snapshot(r)
	err := cp.cfg.Node.Create(ctx, node.CreateSpec{
		ID: s.ID, Template: tpl, Env: s.Env, AccessToken: s.AccessToken, DiskMB: s.DiskMB,
		Limits: runtime.Limits{VCPUs: s.VCPUs, MemoryMB: s.MemoryMB, Pids: cp.cfg.Defaults.Pids},
	})
	if err != nil {
		cp.log.Warn("sandbox failed to start", "sandbox", s.ID, "err", err)
		if serr := cp.setState(r, apiv1.StateFailed, "start failed: "+err.Error()); serr != nil {
			cp.log.Error("record failure", "sandbox", s.ID, "err", serr)
		}
		return
	}
	if err := cp.setState(r, apiv1.StateRunning, ""); err != nil {
		cp.log.Error("record running", "sandbox", s.ID, "err", err)
		return
	}
	cp.createLatency.Observe(time.Since(began).Seconds())
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
	if err := cp.setState(r, apiv1.StateStopping, reason); err != nil {
		return err
	}
	if err := cp.cfg.Node.Destroy(ctx, s.ID); err != nil {
		_ = cp.setState(r, apiv1.StateFailed, "stop failed: "+err.Error())
		return fmt.Errorf("stop %s: %w", s.ID, err)
	}
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
	err = cp.update(r, func(s *Sandbox) { s.ExpiresAt = time.Now().UTC().Add(time.Duration(timeoutS) * time.Second) })
	return cp.snapshot(r), err
}

// Running returns the node handle of a running sandbox, for agent calls.
func (cp *ControlPlane) Running(id string) (*node.Sandbox, error) {
	r, err := cp.lookup(id)
	if err != nil {
		return nil, err
	}
	if s := cp.snapshot(r); s.State != apiv1.StateRunning {
		return nil, &StateError{ID: id, State: s.State, Want: "reach its processes or files (it must be running)"}
	}
	sb, err := cp.cfg.Node.Sandbox(id)
	if errors.Is(err, node.ErrNoSandbox) {
		return nil, &StateError{ID: id, State: cp.snapshot(r).State, Want: "reach its agent"}
	}
	return sb, err
}

func sortByCreation(s []Sandbox) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].CreatedAt.Equal(s[j].CreatedAt) {
			return s[i].ID < s[j].ID
		}
		return s[i].CreatedAt.Before(s[j].CreatedAt)
	})
}
