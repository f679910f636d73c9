package controlplane

import (
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/pkg/apiv1"
)

// maxBranches bounds one branch request.
const maxBranches = 64

// Branch forks a running sandbox into count new sandboxes with identical
// memory, processes and filesystem. The source is frozen only while it is
// captured and then keeps running. Each branch gets its own id, access
// token, hostname and fresh entropy, and starts in state starting.
func (cp *ControlPlane) Branch(ctx context.Context, id string, count, timeoutS int) ([]Sandbox, error) {
	if count < 1 || count > maxBranches {
		return nil, invalid("count must be between 1 and %d, got %d", maxBranches, count)
	}
	captureID := newID()
	volume := path.Join("snapshots", id, "branch-"+captureID)
	image := filepath.Join(cp.cfg.ImagesDir, id, "branches", captureID)
	var src Sandbox
	_, err := cp.locked(id, func(r *record) error {
		if err := cp.require(r, "branch", apiv1.StateRunning, apiv1.StatePaused); err != nil {
			return err
		}
		src = cp.snapshot(r)
		return cp.step(r, apiv1.StateSnapshotting, src.State, "", func() error {
			return cp.cfg.Node.Capture(ctx, id, volume, image)
		})
	})
	if err != nil {
		return nil, err
	}
	release := func() {
		_ = cp.cfg.Node.DeleteVolume(volume)
		_ = os.RemoveAll(image)
	}
	if timeoutS == 0 {
		timeoutS = src.TimeoutS
	}
	req := apiv1.CreateSandboxRequest{
		VCPUs: src.VCPUs, MemoryMB: src.MemoryMB, DiskMB: src.DiskMB, TimeoutS: timeoutS,
		Env: maps.Clone(src.Env), OnTimeout: src.Lifecycle.OnTimeout, AutoResume: &src.Lifecycle.AutoResume,
		IdleSuspendS: src.Lifecycle.IdleSuspendS, Network: src.Network.api(),
	}
	if err := cp.checkRequest(src.Project, &req); err != nil {
		release()
		return nil, err
	}
	if err := cp.allowCreates(src.Project, count); err != nil {
		release()
		return nil, err
	}
	var (
		out     []Sandbox
		started sync.WaitGroup
	)
	for i := 0; i < count; i++ {
		r, err := cp.admit(src.Project, req, src.Template, src.TemplateID, func(s *Sandbox) {
			s.BranchOf = src.ID
			s.Traffic = src.Traffic.forBranch()
			s.Metadata = maps.Clone(src.Metadata)
			// Same placeholders: the branch's processes hold the source's env.
			s.Credentials = slices.Clone(src.Credentials)
		})
		if err != nil {
			if len(out) == 0 {
				release()
				return nil, err
			}
			break // the branches admitted so far go ahead
		}
		started.Add(1)
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			defer started.Done()
			return cp.cfg.Node.ResumeFrom(ctx, node.RestoreSpec{
				ID: s.ID, ImageDir: image, FromVolume: volume, Limits: cp.limits(s), DiskMB: s.DiskMB,
				AccessToken: src.AccessToken, NewIdentity: cp.identity(s), Network: s.policy(),
			})
		})
		out = append(out, cp.snapshot(r))
	}
	// Every branch restores from the same capture; drop it once all ran.
	go func() {
		started.Wait()
		release()
	}()
	cp.recordEvent(src.ID, Event{Type: "branch", Message: "branched into " + strconv.Itoa(len(out))})
	return out, nil
}
