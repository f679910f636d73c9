package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// fakeNode models what the control plane relies on from the node: which
// runtimes run, which volumes and (complete) images exist, and which calls
// were made.
// Failures are injected per test. A method the control plane should not
// call panics (the embedded nil interface).
type fakeNode struct {
	Node

	mu      sync.Mutex
	calls   []string
	alive   map[string]bool // a runtime runs (or is frozen)
	paused  map[string]bool
	volumes map[string]bool
	images  map[string]bool // name → complete

	suspendErr error
	captureErr error
	// restoreErr fails ResumeFrom for the specs it matches.
	restoreErr func(nodeapi.RestoreSpec) error
	// entered and proceed, when set, hold a restore from a volume inside
	// ResumeFrom until the test lets it go on.
	entered, proceed chan struct{}
	// subscribe, when set, answers Events.
	subscribe func(context.Context) (<-chan nodeapi.Event, error)
}

func newFakeNode() *fakeNode {
	return &fakeNode{alive: map[string]bool{}, paused: map[string]bool{}, volumes: map[string]bool{}, images: map[string]bool{}}
}

// Info reports a node of gVisor alone, as every node was before the choice
// of runtime.
func (f *fakeNode) Info(context.Context) (nodeapi.Info, error) { return nodeapi.Info{}, nil }

func (f *fakeNode) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeNode) called(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// hasImage reports whether the node holds the complete image.
func (f *fakeNode) hasImage(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.images[name]
}

func (f *fakeNode) Suspend(_ context.Context, id, image string) error {
	f.record("suspend " + id)
	if f.suspendErr != nil {
		return f.suspendErr
	}
	f.mu.Lock()
	f.alive[id], f.paused[id] = false, false
	f.images[image] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) ResumeFrom(_ context.Context, spec nodeapi.RestoreSpec) error {
	f.record("resumefrom " + spec.ID + " " + spec.Image)
	if spec.FromVolume != "" && f.entered != nil {
		f.entered <- struct{}{}
		<-f.proceed
	}
	if f.restoreErr != nil {
		if err := f.restoreErr(spec); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alive[spec.ID] = true
	f.volumes[path.Join("sandboxes", spec.ID)] = true
	return nil
}

func (f *fakeNode) Capture(_ context.Context, req nodeapi.CaptureRequest) error {
	f.record("capture " + req.ID)
	if f.captureErr != nil {
		return f.captureErr
	}
	f.mu.Lock()
	f.volumes[req.Volume] = true
	f.images[req.Image] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) Image(_ context.Context, name string) (nodeapi.ImageInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nodeapi.ImageInfo{Complete: f.images[name], SizeBytes: 1}, nil
}

func (f *fakeNode) Images(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name := range f.images {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeNode) DeleteImage(_ context.Context, name string) error {
	f.record("deleteimage " + name)
	f.mu.Lock()
	delete(f.images, name)
	f.mu.Unlock()
	return nil
}

// Events is a stream on which nothing happens, unless the test set
// subscribe.
func (f *fakeNode) Events(ctx context.Context) (<-chan nodeapi.Event, error) {
	if f.subscribe != nil {
		return f.subscribe(ctx)
	}
	ch := make(chan nodeapi.Event)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch, nil
}

func (f *fakeNode) Pause(_ context.Context, id string) error {
	f.record("pause " + id)
	f.mu.Lock()
	f.paused[id] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) Resume(_ context.Context, id string) error {
	f.record("resume " + id)
	f.mu.Lock()
	f.paused[id] = false
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) Paused(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused[id], nil
}

// paused is Paused for tests.
func (f *fakeNode) paused1(id string) bool {
	p, _ := f.Paused(context.Background(), id)
	return p
}

func (f *fakeNode) Halt(_ context.Context, id string) error {
	f.record("halt " + id)
	f.mu.Lock()
	f.alive[id] = false
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) Destroy(_ context.Context, id string) error {
	f.record("destroy " + id)
	f.mu.Lock()
	f.alive[id] = false
	delete(f.volumes, path.Join("sandboxes", id))
	f.mu.Unlock()
	return nil
}

// Reconcile runs the fake's recovery steps in the contract's one order.
func (f *fakeNode) Reconcile(ctx context.Context, req nodeapi.ReconcileRequest) (nodeapi.ReconcileResult, error) {
	return nodeapi.Reconcile(ctx, f, req)
}

func (f *fakeNode) Adopt(_ context.Context, id, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alive[id], nil
}

func (f *fakeNode) RevertRestore(_ context.Context, id string) (bool, error) {
	f.record("revert " + id)
	return false, nil
}

func (f *fakeNode) CommitRestore(_ context.Context, id string) error {
	f.record("commit " + id)
	return nil
}

func (f *fakeNode) DeleteVolume(_ context.Context, name string) error {
	f.record("deletevolume " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	for v := range f.volumes {
		if v == name || strings.HasPrefix(v, name+"/") {
			delete(f.volumes, v)
		}
	}
	return nil
}

func (f *fakeNode) VolumeExists(_ context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.volumes[name], nil
}

// hasVolume is VolumeExists for tests.
func (f *fakeNode) hasVolume(name string) bool {
	ok, _ := f.VolumeExists(context.Background(), name)
	return ok
}

func (f *fakeNode) Volumes(_ context.Context, prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for v := range f.volumes {
		if rest, ok := strings.CutPrefix(v, prefix+"/"); ok {
			seen[path.Join(prefix, strings.Split(rest, "/")[0])] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeNode) Quiesce(context.Context, string) error { return nil }
func (f *fakeNode) SettleCheckpoint(_ context.Context, _, image string) (bool, error) {
	return f.hasImage(image), nil
}
func (f *fakeNode) SetNetwork(context.Context, string, network.Policy) error { return nil }
func (f *fakeNode) Sweep(context.Context, []string) error                    { return nil }
func (f *fakeNode) BootFromDisk(_ context.Context, spec nodeapi.CreateSpec) error {
	f.record("boot " + spec.ID)
	f.mu.Lock()
	f.alive[spec.ID] = true
	f.mu.Unlock()
	return nil
}

type fakeTemplates struct{}

func (fakeTemplates) Resolve(_ project.Scope, id string) (nodeapi.TemplateSpec, string, error) {
	spec := nodeapi.TemplateSpec{ID: id}
	// "vm-…" templates are built for both runtimes, microvm the default.
	if strings.HasPrefix(id, "vm-") {
		spec.Runtimes = []string{"microvm", "gvisor"}
	}
	return spec, id, nil
}

// newTestCP starts a control plane on a fresh store holding sandboxes (as
// a server restart finds them) and the node fn prepares.
func newTestCP(t *testing.T, fn *fakeNode, sandboxes ...Sandbox) *ControlPlane {
	t.Helper()
	return newTestCPIn(t, t.TempDir(), fn, sandboxes...)
}

// newTestCPIn is newTestCP with its store in dir.
func newTestCPIn(t *testing.T, dir string, fn *fakeNode, sandboxes ...Sandbox) *ControlPlane {
	t.Helper()
	return newTestCPWith(t, Config{}, dir, fn, sandboxes...)
}

// newTestCPWith is newTestCPIn with cfg's settings (store, templates and
// capacity are the test's; the nodes are fn unless cfg has Nodes).
func newTestCPWith(t *testing.T, cfg Config, dir string, fn *fakeNode, sandboxes ...Sandbox) *ControlPlane {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, s := range sandboxes {
		if err := st.Put(sandboxBucket, s.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Store, cfg.Templates = st, fakeTemplates{}
	if cfg.Nodes == nil {
		cfg.Nodes = OneNode("local", fn)
	}
	// One node's records without a node are on it (as one house's).
	if o, ok := cfg.Nodes.(oneNode); ok && cfg.LocalNode == "" {
		cfg.LocalNode = o.id
	}
	cp := New(cfg)
	if err := cp.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cp
}

func sandbox(id, state string) Sandbox {
	return Sandbox{ID: id, State: state, TemplateID: "tpl", AccessToken: "token-" + id, VCPUs: 1, MemoryMB: 256,
		CreatedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour), TimeoutS: 3600}
}

// twoRunning is a control plane with sandboxes a and b running and a
// snapshot "bs" of b.
func twoRunning(t *testing.T) (*ControlPlane, *fakeNode) {
	t.Helper()
	fn := newFakeNode()
	for _, id := range []string{"a", "b"} {
		fn.alive[id] = true
		fn.volumes["sandboxes/"+id] = true
	}
	cp := newTestCP(t, fn, sandbox("a", apiv1.StateRunning), sandbox("b", apiv1.StateRunning))
	if _, err := cp.CreateSnapshot(context.Background(), "b", "bs"); err != nil {
		t.Fatal(err)
	}
	fn.calls = nil // count from here
	return cp, fn
}

func mustGet(t *testing.T, cp *ControlPlane, id string) Sandbox {
	t.Helper()
	s, err := cp.Get(project.Everything, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A snapshot that a restore is reading cannot be deleted (409 naming the
// restore) until the restore ends; then it can.
func TestSnapshotInUseCannotBeDeleted(t *testing.T) {
	cp, fn := twoRunning(t)
	fn.entered, fn.proceed = make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := cp.Restore(context.Background(), project.Everything, "a", "b/bs")
		done <- err
	}()
	<-fn.entered
	err := cp.DeleteSnapshot("b", "bs")
	var stateErr *StateError
	if !errors.As(err, &stateErr) || !strings.Contains(err.Error(), "a restore of sandbox a") {
		t.Fatalf("delete of a snapshot in use: %v; want a StateError naming the restore", err)
	}
	close(fn.proceed)
	if err := <-done; err != nil {
		t.Fatalf("restore: %v", err)
	}
	if err := cp.DeleteSnapshot("b", "bs"); err != nil {
		t.Fatalf("delete after the restore ended: %v", err)
	}
	if _, err := cp.Restore(context.Background(), project.Everything, "a", "b/bs"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of a deleted snapshot: %v; want not found", err)
	}
	if s := mustGet(t, cp, "a"); s.State != apiv1.StateRunning {
		t.Fatalf("a is %s after a restore of a deleted snapshot", s.State)
	}
}

// A restore that fails after the target was suspended and its volume
// swapped brings the old sandbox back from the suspend image the restore
// made, in the state it was in, and keeps nothing of the attempt.
func TestFailedRestoreLeavesSandboxAsItWas(t *testing.T) {
	for _, from := range []string{apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended} {
		t.Run(from, func(t *testing.T) {
			cp, fn := twoRunning(t)
			ctx := context.Background()
			switch from {
			case apiv1.StatePaused:
				if _, err := cp.Pause(ctx, "a"); err != nil {
					t.Fatal(err)
				}
			case apiv1.StateSuspended:
				if _, err := cp.Suspend(ctx, "a"); err != nil {
					t.Fatal(err)
				}
			}
			before := mustGet(t, cp, "a")
			// The restore from the snapshot fails (as after the swap: the
			// node has put the old volume back); the way back works.
			fn.restoreErr = func(spec nodeapi.RestoreSpec) error {
				if spec.FromVolume != "" {
					return errors.New("runsc restore: injected failure")
				}
				return nil
			}
			if _, err := cp.Restore(ctx, project.Everything, "a", "b/bs"); err == nil {
				t.Fatal("restore succeeded despite the injected failure")
			}
			s := mustGet(t, cp, "a")
			if s.State != from || s.Restoring != "" || s.Snapshot != "" {
				t.Fatalf("after a failed restore: state %s, restoring %q, snapshot %q; want %s as before", s.State, s.Restoring, s.Snapshot, from)
			}
			if fn.called("commit a") != 0 {
				t.Fatal("a failed restore committed (dropped the old volume)")
			}
			if !fn.hasVolume("sandboxes/a") {
				t.Fatal("the root volume is gone")
			}
			if from == apiv1.StateSuspended {
				if s.Image != before.Image || !fn.hasImage(s.Image) {
					t.Fatalf("suspended sandbox lost its image: %q", s.Image)
				}
				return
			}
			if s.Image != "" {
				t.Fatalf("the image of the way back is still recorded: %q", s.Image)
			}
			if fn.hasImage(suspendImage("a")) {
				t.Fatal("the image of the way back is still on the node")
			}
			if fn.called("resumefrom a "+suspendImage("a")) != 1 {
				t.Fatalf("the old memory was not restored: calls %v", fn.calls)
			}
			if fn.paused1("a") != (from == apiv1.StatePaused) {
				t.Fatalf("paused=%v after the way back from %s", fn.paused1("a"), from)
			}
		})
	}
}

// When even the way back fails, the sandbox stays suspended on its image:
// whole, resumed on next use, never failed. A restore whose first step
// (the suspend) fails leaves the sandbox running.
func TestFailedRestoreNeverFails(t *testing.T) {
	cp, fn := twoRunning(t)
	ctx := context.Background()
	fn.restoreErr = func(nodeapi.RestoreSpec) error { return errors.New("injected") }
	if _, err := cp.Restore(ctx, project.Everything, "a", "b/bs"); err == nil {
		t.Fatal("restore succeeded despite the injected failure")
	}
	s := mustGet(t, cp, "a")
	if s.State != apiv1.StateSuspended || !fn.hasImage(s.Image) {
		t.Fatalf("after restore and way back failed: %s, image %q; want suspended on its image", s.State, s.Image)
	}

	cp, fn = twoRunning(t)
	fn.suspendErr = errors.New("injected")
	if _, err := cp.Restore(ctx, project.Everything, "a", "b/bs"); err == nil {
		t.Fatal("restore succeeded despite the failed suspend")
	}
	if s := mustGet(t, cp, "a"); s.State != apiv1.StateRunning || s.Image != "" || s.Restoring != "" {
		t.Fatalf("after the suspend failed: %+v", s)
	}
	if fn.called("resumefrom") != 0 {
		t.Fatal("restored although the suspend failed")
	}
}

// A restore that works is recorded, then commits (drops the old volume)
// and forgets the suspend image it went through.
func TestRestoreCommitsAfterRecording(t *testing.T) {
	cp, fn := twoRunning(t)
	got, err := cp.Restore(context.Background(), project.Everything, "a", "b/bs")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != apiv1.StateRunning || got.Snapshot != "b/bs" || got.Image != "" || got.Restoring != "" {
		t.Fatalf("after restore: %+v", got)
	}
	if fn.called("commit a") != 1 {
		t.Fatal("the old volume was not dropped")
	}
	if fn.hasImage(suspendImage("a")) {
		t.Fatal("the image the restore went through is left")
	}
}

// Recovery after a crash in a restore undoes it; after a crash in a resume
// it drops the suspend image the live runtime came from.
func TestRecoverySettlesRestoreAndResume(t *testing.T) {
	image, resumeImage := suspendImage("r"), suspendImage("s")
	fn := newFakeNode()
	fn.images[image], fn.images[resumeImage] = true, true
	fn.volumes["sandboxes/r"], fn.volumes["sandboxes/s"] = true, true
	fn.alive["s"] = true // the resume got as far as running it
	restoring := sandbox("r", apiv1.StateResuming)
	restoring.Restoring, restoring.Image = "b/bs", image
	resuming := sandbox("s", apiv1.StateResuming)
	resuming.Image = resumeImage
	cp := newTestCP(t, fn, restoring, resuming)

	if fn.called("revert r") != 1 {
		t.Fatal("the interrupted restore was not reverted")
	}
	r := mustGet(t, cp, "r")
	if r.State != apiv1.StateSuspended || r.Restoring != "" || r.Image != image {
		t.Fatalf("interrupted restore: %s, restoring %q, image %q; want suspended on its own image", r.State, r.Restoring, r.Image)
	}
	if r.Recovered != "" {
		t.Fatalf("an undone restore lost nothing, yet is flagged recovered: %q", r.Recovered)
	}
	if fn.called("commit r") != 0 {
		t.Fatal("an unrecorded restore was committed")
	}
	s := mustGet(t, cp, "s")
	if s.State != apiv1.StateRunning || s.Image != "" {
		t.Fatalf("interrupted resume: %s, image %q; want running without an image", s.State, s.Image)
	}
	if fn.hasImage(resumeImage) {
		t.Fatal("the stale suspend image is still on the node")
	}
}

// A branch whose start a crash interrupted starts again from its capture,
// which is dropped once it ran; captures and images nothing owns are swept.
func TestRecoveryRestartsBranchesAndSweepsCaptures(t *testing.T) {
	capture := Source{Volume: "snapshots/src/branch-1", Image: branchImage("src", "1"), AccessToken: "t"}
	orphan := branchImage("src", "2")
	fn := newFakeNode()
	fn.images[capture.Image], fn.images[orphan] = true, true
	fn.alive["src"], fn.volumes["sandboxes/src"] = true, true
	fn.volumes[capture.Volume], fn.volumes["snapshots/src/branch-2"], fn.volumes["snapshots/old/x"] = true, true, true
	branch := sandbox("br", apiv1.StateStarting)
	branch.BranchOf, branch.Source = "src", &capture
	cp := newTestCP(t, fn, sandbox("src", apiv1.StateRunning), branch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cp.Wait(ctx, "br", apiv1.StateRunning); err != nil {
		t.Fatalf("interrupted branch: %v", err)
	}
	for _, v := range []string{"snapshots/src/branch-2", "snapshots/old/x", "snapshots/old"} {
		if fn.hasVolume(v) {
			t.Errorf("orphaned capture %s was not swept", v)
		}
	}
	if fn.hasImage(orphan) {
		t.Error("orphaned capture image left")
	}
	// The capture goes once the branch ran.
	deadline := time.Now().Add(5 * time.Second)
	for fn.hasVolume(capture.Volume) || fn.hasImage(capture.Image) {
		if time.Now().After(deadline) {
			t.Fatal("the capture was not dropped after the branch ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A snapshot a new sandbox is being started from cannot be deleted either,
// until the start ended.
func TestSnapshotInUseByStartCannotBeDeleted(t *testing.T) {
	cp, fn := twoRunning(t)
	cp.cfg.Defaults = Defaults{VCPUs: 1, MemoryMB: 256, DiskMB: 1024, TimeoutS: 300}
	fn.entered, fn.proceed = make(chan struct{}), make(chan struct{})
	sb, err := cp.Create(project.Everything, apiv1.CreateSandboxRequest{Snapshot: "b/bs"})
	if err != nil {
		t.Fatal(err)
	}
	<-fn.entered
	if err := cp.DeleteSnapshot("b", "bs"); err == nil || !strings.Contains(err.Error(), "a start of a new sandbox") {
		t.Fatalf("delete of a snapshot a start reads: %v; want a StateError naming the start", err)
	}
	close(fn.proceed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cp.Wait(ctx, sb.ID, apiv1.StateRunning); err != nil {
		t.Fatal(err)
	}
	// The hold ends with the start (released right after it).
	deadline := time.Now().Add(5 * time.Second)
	for cp.DeleteSnapshot("b", "bs") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot stayed held after the start ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A restore ref that is another project's snapshot id and also the name of
// one of the sandbox's own snapshots restores the sandbox's own: the other
// project's snapshot is passed over as if it did not exist, so its id
// cannot be told from a missing one.
func TestRestorePassesOverAnotherProjectsSnapshot(t *testing.T) {
	fn := newFakeNode()
	a, b := sandbox("a", apiv1.StateRunning), sandbox("b", apiv1.StateRunning)
	a.Project, b.Project = "pa", "pb"
	for _, id := range []string{"a", "b"} {
		fn.alive[id] = true
		fn.volumes["sandboxes/"+id] = true
	}
	cp := newTestCP(t, fn, a, b)
	theirs, err := cp.CreateSnapshot(context.Background(), "b", "bs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Restore(context.Background(), project.In("pa"), "a", theirs.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of a to project pb's snapshot by id: %v; want not found", err)
	}
	if _, err := cp.CreateSnapshot(context.Background(), "a", theirs.ID); err != nil {
		t.Fatal(err)
	}
	fn.calls = nil
	if _, err := cp.Restore(context.Background(), project.In("pa"), "a", theirs.ID); err != nil {
		t.Fatalf("restore of a to its own snapshot named %s: %v", theirs.ID, err)
	}
	// A call names sandbox b or one of its images ("b/..."); a substring
	// test would also match inside random ids of a's snapshots.
	for _, c := range fn.calls {
		for _, arg := range strings.Fields(c)[1:] {
			if arg == "b" || strings.HasPrefix(arg, "b/") {
				t.Fatalf("the restore touched project pb's snapshot: %v", fn.calls)
			}
		}
	}
}

// An idle sandbox whose runtime cannot save its memory (a microVM with
// volumes mounted) is still suspended by the idle check: it drops the
// memory, as keep_memory false would, rather than stay running and be
// refused again at every check. An explicit suspend is refused as it was.
func TestIdleSuspendDropsMemoryTheRuntimeCannotSave(t *testing.T) {
	fn := newFakeNode()
	fn.alive["a"], fn.volumes["sandboxes/a"] = true, true
	fn.suspendErr = fmt.Errorf("a VM with a share cannot be saved (%w)", nodeapi.ErrNoCheckpoint)
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", unsyncable{fn})}, t.TempDir(), fn, sandbox("a", apiv1.StateRunning))
	ctx := context.Background()
	if _, err := cp.Suspend(ctx, "a"); !errors.Is(err, nodeapi.ErrNoCheckpoint) {
		t.Fatalf("explicit suspend: %v, want the refusal", err)
	}
	if s := mustGet(t, cp, "a"); s.State != apiv1.StateRunning {
		t.Fatalf("after the refused suspend: %s", s.State)
	}
	cp.mu.Lock()
	cp.sandboxes["a"].Lifecycle.IdleSuspendS = 1
	cp.lastActive["a"] = time.Now().Add(-time.Minute)
	cp.mu.Unlock()
	cp.reap(ctx)
	s := waitState(t, cp, "a", apiv1.StateSuspended)
	if !s.DiskOnly || s.Image != "" || !strings.Contains(s.Reason, "its memory could not be saved") {
		t.Fatalf("idle suspend of a sandbox whose memory cannot be saved: %+v", s)
	}
	if fn.called("halt a") != 1 {
		t.Fatal("the sandbox was not stopped")
	}
}

// A rolling snapshot the runtime refuses (a microVM with volumes mounted)
// leaves the sandbox running, says why in its events, and is tried again
// an interval later, not at every check of the lifecycle loop.
func TestRefusedRollingSnapshotWaitsAnInterval(t *testing.T) {
	fn := newFakeNode()
	fn.alive["a"], fn.volumes["sandboxes/a"] = true, true
	fn.captureErr = fmt.Errorf("a VM with a share cannot be saved (%w)", nodeapi.ErrNoCheckpoint)
	started := time.Now().Add(-2 * time.Minute).UTC()
	sb := sandbox("a", apiv1.StateRunning)
	sb.StartedAt, sb.Lifecycle.SnapshotIntervalS = &started, 60
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", fn)}, t.TempDir(), fn, sb)
	ctx := context.Background()
	reapUntilIdle := func() {
		cp.reap(ctx)
		r, err := cp.lookup("a")
		if err != nil {
			t.Fatal(err)
		}
		r.lock.Lock() // the chore runs in the background under the lock
		r.lock.Unlock()
	}
	reapUntilIdle()
	if n := fn.called("capture a"); n != 1 {
		t.Fatalf("%d captures at the first check, want 1", n)
	}
	s := mustGet(t, cp, "a")
	if s.State != apiv1.StateRunning || s.SnapshotTriedAt == nil {
		t.Fatalf("after the refused rolling snapshot: %s, tried at %v", s.State, s.SnapshotTriedAt)
	}
	events, err := cp.Events("a")
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; !strings.Contains(last.Message, "rolling snapshot not taken: its runtime cannot save its memory") {
		t.Errorf("last event %q does not say why", last.Message)
	}
	for range 3 {
		reapUntilIdle()
	}
	if n := fn.called("capture a"); n != 1 {
		t.Fatalf("%d captures within the interval, want 1", n)
	}
	cp.mu.Lock()
	earlier := time.Now().Add(-61 * time.Second)
	cp.sandboxes["a"].SnapshotTriedAt = &earlier
	cp.mu.Unlock()
	reapUntilIdle()
	if n := fn.called("capture a"); n != 2 {
		t.Fatalf("%d captures an interval later, want 2", n)
	}
}

// unsyncable is a node whose sandboxes take no calls (a suspend's sync of
// their disk is skipped, as it is best effort).
type unsyncable struct{ *fakeNode }

func (unsyncable) Sandbox(context.Context, string) (nodeapi.Sandbox, error) {
	return nil, nodeapi.ErrNoSandbox
}
