package controlplane

import (
	"context"
	"maps"
	"path"
	"slices"
	"strconv"
	"sync"

	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/nodeapi"
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
	image := branchImage(id, captureID)
	var src Sandbox
	var n Node
	_, err := cp.locked(id, func(r *record) error {
		if err := cp.require(r, "branch", apiv1.StateRunning, apiv1.StatePaused); err != nil {
			return err
		}
		src = cp.snapshot(r)
		var err error
		if n, err = cp.nodeOf(src); err != nil {
			return err
		}
		return cp.step(r, apiv1.StateSnapshotting, src.State, "", func() error {
			return n.Capture(ctx, nodeapi.CaptureRequest{ID: id, Volume: volume, Image: image})
		})
	})
	crashpoint.Hit("branch-captured")
	if err != nil {
		return nil, err
	}
	release := func() { cp.dropCapture(n, volume, image) }
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
	// The capture is on the source's node: the branches run there.
	capture := Source{Volume: volume, Image: image, AccessToken: src.AccessToken, Node: src.Node}
	var admitted []*record
	for i := 0; i < count; i++ {
		r, err := cp.admit(src.Project, req, src.Template, src.TemplateID, func(s *Sandbox) {
			s.BranchOf = src.ID
			s.Runtime, s.Isolation = src.Runtime, src.Isolation
			s.Traffic = src.Traffic.forBranch()
			s.Metadata = maps.Clone(src.Metadata)
			// Same placeholders: the branch's processes hold the source's env.
			s.Credentials = slices.Clone(src.Credentials)
			s.Source = &capture
			s.Node = src.Node
			// The same volumes, live: a branch shares them, never a copy.
			s.Mounts = slices.Clone(src.Mounts)
		})
		if err != nil {
			if len(admitted) == 0 {
				release()
				return nil, err
			}
			break // the branches admitted so far go ahead
		}
		admitted = append(admitted, r)
	}
	crashpoint.Hit("branch-admitted")
	cp.startCopies(admitted, capture, release)
	out := make([]Sandbox, len(admitted))
	for i, r := range admitted {
		out[i] = cp.snapshot(r)
	}
	cp.recordEvent(src.ID, Event{Type: "branch", Message: "branched into " + strconv.Itoa(len(out))})
	return out, nil
}

// Source is the capture (a read-only volume and a memory image) that a new
// sandbox is restored from: a branch's capture or a snapshot.
type Source struct {
	Volume string `json:"volume"`
	Image  string `json:"image,omitempty"`
	// LegacyImageDir is the image's path as earlier versions recorded
	// it; Recover turns it into Image.
	LegacyImageDir string `json:"image_dir,omitempty"`
	// AccessToken is the token the agent in the image holds.
	AccessToken string `json:"access_token"`
	// Snapshot is the key of the snapshot the capture belongs to, empty
	// for a branch's private capture.
	Snapshot string `json:"snapshot,omitempty"`
	// Node holds the capture ("" as on sandboxes).
	Node string `json:"node,omitempty"`
}

// startCopies starts each of rs (recorded as starting, on src's node) as a
// copy of src with an identity of its own, and calls done once every start
// has ended: the copies share the capture until then.
func (cp *ControlPlane) startCopies(rs []*record, src Source, done func()) {
	var started sync.WaitGroup
	started.Add(len(rs))
	for _, r := range rs {
		cp.launch(r, func(ctx context.Context, s Sandbox) error {
			defer started.Done()
			n, err := cp.nodeOf(s)
			if err != nil {
				return err
			}
			return n.ResumeFrom(ctx, nodeapi.RestoreSpec{
				ID: s.ID, Image: src.Image, FromVolume: src.Volume, Limits: cp.limits(s), DiskMB: s.DiskMB,
				AccessToken: src.AccessToken, NewIdentity: cp.identity(s), Network: s.policy(),
				Mounts: nodeMounts(s.Mounts), Runtime: s.RuntimeName(),
			})
		})
	}
	go func() {
		started.Wait()
		done()
	}()
}
