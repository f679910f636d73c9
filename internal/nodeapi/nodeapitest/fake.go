package nodeapitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

// Fake is an in-memory nodeapi.Node for unit tests of the code that drives
// nodes (and of noderpc). Its sandboxes hold a file tree in memory and run
// a handful of commands by imitation (see run): echo, cat, sleep, true,
// false, "sh -c" with statements separated by "; " (echo, echo ... >&2,
// cat, sleep, exit), and echo-server PORT, which echoes what a DialPort
// connection sends. Checkpoint images and volumes are copies of file
// trees; nothing has memory state. It is not a node: tests of behaviour
// that needs a real sandbox run against a real one.
type Fake struct {
	// JournalLimit, when set before use, bounds the output a session's
	// journal holds; older chunks are dropped.
	JournalLimit int

	id string

	mu      sync.Mutex
	running map[string]*fakeSandbox
	disks   map[string]*tree // root volumes, by sandbox id
	volumes map[string]*tree
	// volumeLimits are the persistent volumes' size limits (bytes, 0
	// none); mounts the volume mounts of each sandbox's last start.
	volumeLimits   map[string]int64
	mounts         map[string][]nodeapi.VolumeMount
	images         map[string]*tree
	templateImages map[string]bool
	pools          map[string]*fakePool
	subs           map[chan nodeapi.Event]struct{}
	archives       map[string][]byte // staged template archives, by handle
	lastBuild      nodeapi.TemplateBuildRequest
	samples        map[string][]nodeapi.MetricSample
}

var _ nodeapi.Node = (*Fake)(nil)

// FakeHarness is the harness for fake reached through node: the fake
// itself, or a client of it (noderpc runs the suite both ways).
func FakeHarness(node nodeapi.Node, fake *Fake) Harness {
	return Harness{
		Node:         node,
		Template:     nodeapi.TemplateSpec{ID: "minimal", RootfsVolume: "templates/minimal"},
		TemplateName: "minimal",
		Limits:       runtime.Limits{VCPUs: 1, MemoryMB: 256},
		DiskMB:       1024,
		EchoServer:   func(port int) []string { return []string{"echo-server", strconv.Itoa(port)} },
		Kill:         func(t *testing.T, id string) { fake.Kill(id, "killed by the test") },
	}
}

// NewFake returns an empty fake node named id.
func NewFake(id string) *Fake {
	return &Fake{
		id:             id,
		running:        map[string]*fakeSandbox{},
		disks:          map[string]*tree{},
		volumes:        map[string]*tree{},
		images:         map[string]*tree{},
		templateImages: map[string]bool{},
		pools:          map[string]*fakePool{},
		subs:           map[chan nodeapi.Event]struct{}{},
		samples:        map[string][]nodeapi.MetricSample{},
	}
}

type fakePool struct {
	template nodeapi.TemplateSpec
	limits   nodeapi.PoolLimits
	size     int
	ready    []string
}

// Kill ends a sandbox's runtime without the node being asked, as a crash
// or an OOM kill would: the node reports an exit event with reason.
func (f *Fake) Kill(id, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.running[id]
	if !ok {
		return
	}
	f.disks[id] = sb.fs
	delete(f.running, id)
	sb.stop()
	f.emitLocked(nodeapi.Event{Type: nodeapi.EventExit, Sandbox: id, Reason: reason})
}

func (f *Fake) emitLocked(ev nodeapi.Event) {
	ev.Time = time.Now()
	for ch := range f.subs {
		select {
		case ch <- ev:
		default: // a consumer that does not keep up loses events
		}
	}
}

func (f *Fake) emit(ev nodeapi.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emitLocked(ev)
}

func noSandbox(op, id string) error {
	return fmt.Errorf("%s %s: %w", op, id, nodeapi.ErrNoSandbox)
}

// get returns a running sandbox; f.mu is held.
func (f *Fake) get(op, id string) (*fakeSandbox, error) {
	sb, ok := f.running[id]
	if !ok {
		return nil, noSandbox(op, id)
	}
	return sb, nil
}

func (f *Fake) Info(ctx context.Context) (nodeapi.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info := nodeapi.Info{ID: f.id, VCPUs: 4, MemoryMB: 8192, DiskMB: 100 << 10, Sandboxes: len(f.running), DiskFreeMB: 90 << 10, MemoryFreeMB: 8192 - 256*len(f.running),
		Runtimes: map[string]string{runtime.GVisor: runtime.IsolationGVisor}}
	for id := range f.templateImages {
		info.TemplateImages = append(info.TemplateImages, id)
	}
	sort.Strings(info.TemplateImages)
	// The templates it holds are the root volumes it built or received.
	for name := range f.volumes {
		if id, ok := strings.CutPrefix(name, "templates/"); ok && !strings.Contains(id, "/") {
			info.Templates = append(info.Templates, id)
		}
	}
	sort.Strings(info.Templates)
	for id, p := range f.pools {
		if info.Pools == nil {
			info.Pools = map[string]nodeapi.PoolStatus{}
		}
		info.Pools[id] = nodeapi.PoolStatus{Size: p.size, Ready: len(p.ready)}
	}
	return info, nil
}

// startLocked runs a sandbox on fs; f.mu is held.
func (f *Fake) startLocked(id, token string, fs *tree) (*fakeSandbox, error) {
	if id == "" {
		return nil, fmt.Errorf("create: empty sandbox id")
	}
	if _, ok := f.running[id]; ok {
		return nil, fmt.Errorf("create %s: sandbox already exists", id)
	}
	sb := &fakeSandbox{f: f, id: id, token: token, fs: fs, sessions: map[string]*fakeSession{}, listeners: map[int]func(net.Conn){}, done: make(chan struct{})}
	f.running[id] = sb
	f.disks[id] = fs
	f.sampleLocked(id)
	return sb, nil
}

// sampleLocked takes a sample of a running sandbox unless the last one is
// younger than the interval, as a node's sampler would have; f.mu is held.
func (f *Fake) sampleLocked(id string) {
	s := f.samples[id]
	now := time.Now().UTC()
	if len(s) > 0 && now.Sub(s[len(s)-1].Time) < nodeapi.MetricsInterval {
		return
	}
	f.samples[id] = append(s, nodeapi.MetricSample{
		Time: now, CPUCount: 1, CPUUsedPct: 1, MemUsed: 16 << 20, MemTotal: 256 << 20, DiskUsed: 1 << 20, DiskTotal: 1 << 30,
	})
}

func (f *Fake) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.MetricSample, error) {
	if end.Before(start) {
		return nil, fmt.Errorf("metrics of %s: end is before start", id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[id]; ok {
		f.sampleLocked(id)
	}
	out := []nodeapi.MetricSample{}
	for _, m := range f.samples[id] {
		if !m.Time.Before(start) && !m.Time.After(end) {
			out = append(out, m)
		}
	}
	return out, nil
}

func checkTemplate(t nodeapi.TemplateSpec) error {
	if err := nodeapi.ValidName(t.ID); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	if t.RootfsVolume != "" {
		if err := nodeapi.ValidName(t.RootfsVolume); err != nil {
			return fmt.Errorf("template %s root volume: %w", t.ID, err)
		}
	}
	return nil
}

func (f *Fake) Create(ctx context.Context, req nodeapi.CreateRequest) error {
	if err := checkTemplate(req.Spec.Template); err != nil {
		return err
	}
	// The fake's one backend is gVisor's, as a node's of today.
	if err := req.Spec.Template.CheckRuntime(req.Spec.RuntimeName()); err != nil {
		return err
	}
	if rt := req.Spec.RuntimeName(); rt != runtime.GVisor {
		return fmt.Errorf("create %s: %w: this node has no %s runtime", req.Spec.ID, nodeapi.ErrNoRuntime, rt)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	token := req.Spec.AccessToken
	if req.Warm {
		f.templateImages[req.Spec.Template.ID] = true
		if req.Identity.AccessToken != "" {
			token = req.Identity.AccessToken
		}
	}
	if err := f.mountLocked(req.Spec.ID, req.Spec.Mounts); err != nil {
		return err
	}
	_, err := f.startLocked(req.Spec.ID, token, newTree())
	return err
}

func (f *Fake) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.ClaimResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pools[req.TemplateID]
	if !ok || p.limits != req.Limits || len(p.ready) == 0 {
		return nodeapi.ClaimResult{}, nil
	}
	id := p.ready[0]
	p.ready = p.ready[1:]
	f.running[id].token = req.Identity.AccessToken
	f.fillLocked(p)
	return nodeapi.ClaimResult{Claimed: true, ID: id}, nil
}

// fillLocked brings a pool to its size and reports its stock; f.mu is
// held.
func (f *Fake) fillLocked(p *fakePool) {
	for len(p.ready) < p.size {
		id := sandboxid.New()
		if _, err := f.startLocked(id, "", newTree()); err != nil {
			return
		}
		p.ready = append(p.ready, id)
	}
	for len(p.ready) > p.size {
		id := p.ready[len(p.ready)-1]
		p.ready = p.ready[:len(p.ready)-1]
		f.destroyLocked(id)
	}
	st := nodeapi.PoolStatus{Size: p.size, Ready: len(p.ready)}
	f.emitLocked(nodeapi.Event{Type: nodeapi.EventPool, TemplateID: p.template.ID, Pool: &st})
}

func (f *Fake) BootFromDisk(ctx context.Context, spec nodeapi.CreateSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.disks[spec.ID]
	if !ok {
		return fmt.Errorf("boot %s from disk: no root volume", spec.ID)
	}
	_, err := f.startLocked(spec.ID, spec.AccessToken, fs)
	return err
}

func (f *Fake) destroyLocked(id string) {
	if sb, ok := f.running[id]; ok {
		sb.stop()
		delete(f.running, id)
	}
	delete(f.disks, id)
	delete(f.samples, id)
}

func (f *Fake) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyLocked(id)
	return nil
}

// Halt of a sandbox whose runtime is gone already is not an error, as on
// the real node: a reconcile halts again after a crash in between.
func (f *Fake) Halt(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.running[id]; ok {
		sb.stop()
		delete(f.running, id)
	}
	return nil
}

// Reconcile runs the fake's steps in the contract's one order.
func (f *Fake) Reconcile(ctx context.Context, req nodeapi.ReconcileRequest) (nodeapi.ReconcileResult, error) {
	return nodeapi.Reconcile(ctx, f, req)
}

// Adopt is a recovery step (nodeapi.RecoverySteps): the fake's runtimes
// outlive nothing, so a sandbox it runs is adopted as it is.
func (f *Fake) Adopt(ctx context.Context, id, accessToken string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[id]
	return ok, nil
}

func (f *Fake) Sweep(ctx context.Context, keep []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := map[string]bool{}
	for _, id := range keep {
		kept[id] = true
	}
	for _, p := range f.pools {
		for _, id := range p.ready {
			kept[id] = true
		}
	}
	for id := range f.running {
		if !kept[id] {
			f.destroyLocked(id)
		}
	}
	return nil
}

func (f *Fake) Sandboxes(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.running {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

func (f *Fake) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("pause", id)
	if err != nil {
		return err
	}
	sb.paused = true
	return nil
}

func (f *Fake) Resume(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("resume", id)
	if err != nil {
		return err
	}
	sb.paused = false
	return nil
}

func (f *Fake) Paused(ctx context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("paused", id)
	if err != nil {
		return false, err
	}
	return sb.paused, nil
}

func (f *Fake) Suspend(ctx context.Context, id, image string) error {
	if err := nodeapi.ValidName(image); err != nil {
		return fmt.Errorf("suspend %s: image: %w", id, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("suspend", id)
	if err != nil {
		return err
	}
	f.images[image] = sb.fs.copy()
	sb.stop()
	delete(f.running, id)
	return nil
}

func (f *Fake) Capture(ctx context.Context, req nodeapi.CaptureRequest) error {
	for _, name := range []string{req.Image, req.Volume} {
		if err := nodeapi.ValidName(name); err != nil {
			return fmt.Errorf("capture %s: %w", req.ID, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("capture", req.ID)
	if err != nil {
		return err
	}
	f.images[req.Image] = sb.fs.copy()
	f.volumes[req.Volume] = sb.fs.copy()
	return nil
}

func (f *Fake) ResumeFrom(ctx context.Context, spec nodeapi.RestoreSpec) error {
	if err := nodeapi.ValidName(spec.Image); err != nil {
		return fmt.Errorf("restore %s: image: %w", spec.ID, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.images[spec.Image]; !ok {
		return fmt.Errorf("restore %s: image %s does not exist", spec.ID, spec.Image)
	}
	fs := f.disks[spec.ID]
	if spec.FromVolume != "" {
		if err := nodeapi.ValidName(spec.FromVolume); err != nil {
			return fmt.Errorf("restore %s: volume: %w", spec.ID, err)
		}
		vol, ok := f.volumes[spec.FromVolume]
		if !ok {
			return fmt.Errorf("restore %s: volume %s does not exist", spec.ID, spec.FromVolume)
		}
		fs = vol.copy()
	}
	if fs == nil {
		return fmt.Errorf("restore %s: no root volume", spec.ID)
	}
	token := spec.AccessToken
	if spec.NewIdentity != nil {
		token = spec.NewIdentity.AccessToken
	}
	if err := f.mountLocked(spec.ID, spec.Mounts); err != nil {
		return err
	}
	_, err := f.startLocked(spec.ID, token, fs)
	return err
}

func (f *Fake) CommitRestore(ctx context.Context, id string) error { return nil }

// RevertRestore and Quiesce are recovery steps with nothing to do: the
// fake's restores and runtime commands finish within the call.
func (f *Fake) RevertRestore(ctx context.Context, id string) (bool, error) { return false, nil }
func (f *Fake) Quiesce(ctx context.Context, id string) error               { return nil }

// SettleCheckpoint is a recovery step: the fake's images are whole once
// written.
func (f *Fake) SettleCheckpoint(ctx context.Context, id, image string) (bool, error) {
	info, err := f.Image(ctx, image)
	return info.Complete, err
}

func (f *Fake) Rekey(ctx context.Context, id string, identity nodeapi.Identity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("rekey", id)
	if err != nil {
		return err
	}
	sb.token = identity.AccessToken
	return nil
}

func (f *Fake) SetNetwork(ctx context.Context, id string, policy network.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("set network of", id)
	if err != nil {
		return err
	}
	sb.policy = policy
	return nil
}

// Policy returns the egress policy a running sandbox was last given.
func (f *Fake) Policy(id string) (network.Policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.running[id]
	if !ok {
		return network.Policy{}, false
	}
	return sb.policy, true
}

func (f *Fake) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get("stats of", id)
	if err != nil {
		return runtime.Stats{}, err
	}
	return runtime.Stats{CPUNanos: 1, MemoryBytes: 16 << 20, Pids: uint64(1 + len(sb.sessions))}, nil
}

// named runs fn under f.mu once name is a valid name.
func (f *Fake) named(op, name string, fn func()) error {
	if err := nodeapi.ValidName(name); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	return nil
}

func (f *Fake) Image(ctx context.Context, image string) (info nodeapi.ImageInfo, err error) {
	err = f.named("image", image, func() {
		if fs, ok := f.images[image]; ok {
			info = nodeapi.ImageInfo{Complete: true, SizeBytes: 4096 + fs.size()}
		}
	})
	return info, err
}

func sortedKeys[V any](m map[string]V, keep func(string) bool) []string {
	var out []string
	for k := range m {
		if keep(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (f *Fake) Images(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.images, func(string) bool { return true }), nil
}

func (f *Fake) DeleteImage(ctx context.Context, image string) error {
	return f.named("delete image", image, func() { delete(f.images, image) })
}

// Volumes lists the volumes Capture made (root volumes are not listed)
// and the directories of them directly under prefix ("" for the top).
func (f *Fake) Volumes(ctx context.Context, prefix string) ([]string, error) {
	if prefix != "" {
		if err := nodeapi.ValidName(prefix); err != nil {
			return nil, fmt.Errorf("volumes: %w", err)
		}
		prefix += "/"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	under := map[string]bool{}
	for name := range f.volumes {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			first, _, _ := strings.Cut(rest, "/")
			under[prefix+first] = true
		}
	}
	return sortedKeys(under, func(string) bool { return true }), nil
}

func (f *Fake) VolumeExists(ctx context.Context, name string) (ok bool, err error) {
	err = f.named("volume", name, func() {
		store, key := f.volumeStore(name)
		_, ok = store[key]
	})
	return ok, err
}

// DeleteVolume deletes a volume; the root volume of a sandbox that runs
// stays (its runtime uses it).
func (f *Fake) DeleteVolume(ctx context.Context, name string) error {
	return f.named("delete volume", name, func() {
		if id, ok := rootVolume(name); ok {
			if _, running := f.running[id]; !running {
				delete(f.disks, id)
			}
			return
		}
		delete(f.volumes, name)
	})
}

// inVolume runs fn on a captured volume's file tree, locked, with p made
// clean. A volume's tree holds no symlinks, so cleaning p is what keeps a
// lookup inside it.
func (f *Fake) inVolume(op, volume, p string, fn func(t *tree, p string) error) error {
	var vol *tree
	if err := f.named(op, volume, func() { vol = f.volumes[volume] }); err != nil {
		return err
	}
	p, err := clean(p)
	if err != nil {
		return err
	}
	if vol == nil {
		return agentErr(http.StatusNotFound, "snapshot filesystem is gone")
	}
	vol.mu.Lock()
	defer vol.mu.Unlock()
	return fn(vol, p)
}

func (f *Fake) ReadVolumeFile(ctx context.Context, volume, p string) (body io.ReadCloser, e *filesystempb.EntryInfo, err error) {
	err = f.inVolume("read volume file", volume, p, func(t *tree, p string) error {
		n, ok := t.nodes[p]
		if !ok {
			return missing(p)
		}
		e, body = t.entry(p, n), http.NoBody
		if !n.dir {
			body = io.NopCloser(bytes.NewReader(n.data))
		}
		return nil
	})
	return body, e, err
}

func (f *Fake) ListVolumeDir(ctx context.Context, volume, p string, opts nodeapi.ListOptions) (page nodeapi.DirPage, err error) {
	err = f.inVolume("list volume dir", volume, p, func(t *tree, p string) error {
		page, err = t.listLocked(p, opts)
		return err
	})
	return page, err
}

func (f *Fake) TemplateImages(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.templateImages, func(string) bool { return true }), nil
}

func (f *Fake) DropTemplateImage(ctx context.Context, templateID string) error {
	return f.named("drop template image", templateID, func() { delete(f.templateImages, templateID) })
}

func (f *Fake) SetPool(ctx context.Context, req nodeapi.PoolRequest) error {
	if err := checkTemplate(req.Template); err != nil {
		return fmt.Errorf("set pool: %w", err)
	}
	if req.Size < 0 {
		return fmt.Errorf("set pool of %s: negative size %d", req.Template.ID, req.Size)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pools[req.Template.ID]
	if !ok || p.limits != req.Limits {
		if ok {
			// Sandboxes made with other limits cannot serve the new ones.
			p.size = 0
			f.fillLocked(p)
		}
		p = &fakePool{template: req.Template, limits: req.Limits}
		f.pools[req.Template.ID] = p
	}
	p.size = req.Size
	f.fillLocked(p)
	if p.size == 0 {
		delete(f.pools, req.Template.ID)
	}
	return nil
}

func (f *Fake) Pool(ctx context.Context, templateID string) (nodeapi.PoolStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pools[templateID]
	if !ok {
		return nodeapi.PoolStatus{}, nil
	}
	return nodeapi.PoolStatus{Size: p.size, Ready: len(p.ready)}, nil
}

func (f *Fake) Events(ctx context.Context) (<-chan nodeapi.Event, error) {
	ch := make(chan nodeapi.Event, 256)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		close(ch)
		f.mu.Unlock()
	})
	return ch, nil
}

func (f *Fake) Sandbox(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get("sandbox", id)
}

// fakeSandbox is a running fake sandbox; its fields are guarded by f.mu.
type fakeSandbox struct {
	f         *Fake
	id        string
	token     string
	fs        *tree
	paused    bool
	policy    network.Policy
	sessions  map[string]*fakeSession
	nextSID   int
	listeners map[int]func(net.Conn)
	done      chan struct{} // closed when the sandbox stops
}

// stop ends the sandbox's processes; f.mu is held.
func (s *fakeSandbox) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

func (s *fakeSandbox) ID() string { return s.id }

// alive returns a context that ends with ctx or when the sandbox stops.
func (s *fakeSandbox) alive(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (s *fakeSandbox) activity() {
	s.f.emit(nodeapi.Event{Type: nodeapi.EventActivity, Sandbox: s.id})
}

// boundedBuffer keeps the first nodeapi.MaxExecOutput bytes written.
type boundedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
}

func (b *boundedBuffer) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := nodeapi.MaxExecOutput - b.buf.Len(); len(p) > room {
		p, b.truncated = p[:room], true
	}
	b.buf.Write(p)
}

func (s *fakeSandbox) Exec(ctx context.Context, spec nodeapi.ExecSpec) (*nodeapi.ExecResult, error) {
	if len(spec.Cmd) == 0 {
		return nil, &nodeapi.AgentError{Status: http.StatusBadRequest, Message: "exec: empty command"}
	}
	ctx, cancel := s.alive(ctx)
	defer cancel()
	if spec.Timeout > 0 {
		var tcancel context.CancelFunc
		ctx, tcancel = context.WithTimeout(ctx, spec.Timeout)
		defer tcancel()
	}
	var stdout, stderr boundedBuffer
	code := s.run(ctx, spec.Cmd, procIO{stdout: stdout.write, stderr: stderr.write})
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("exec in %s: %w after %s", s.id, nodeapi.ErrExecTimeout, spec.Timeout)
	}
	if stdout.buf.Len()+stderr.buf.Len() > 0 {
		s.activity()
	}
	return &nodeapi.ExecResult{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), ExitCode: code, Truncated: stdout.truncated || stderr.truncated}, nil
}

// procIO connects an imitated process.
type procIO struct {
	stdout, stderr func([]byte)
	stdin          <-chan []byte // nil: no stdin
	signals        <-chan int
}

// signalExit is the exit code run reports for a process a signal ended.
func signalExit(sig int) int { return 128 + sig }

// run imitates argv (see Fake) until it ends, ctx ends or a signal comes.
func (s *fakeSandbox) run(ctx context.Context, argv []string, pio procIO) int {
	wait := func(d time.Duration, stdin <-chan []byte) int {
		var timer <-chan time.Time
		if d >= 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		for {
			select {
			case <-timer:
				return 0
			case <-ctx.Done():
				return signalExit(9)
			case sig := <-pio.signals:
				return signalExit(sig)
			case data, ok := <-stdin:
				if !ok {
					return 0
				}
				pio.stdout(data)
			}
		}
	}
	switch argv[0] {
	case "true":
		return 0
	case "false":
		return 1
	case "echo":
		pio.stdout([]byte(strings.Join(argv[1:], " ") + "\n"))
		return 0
	case "cat":
		for _, p := range argv[1:] {
			body, _, err := s.ReadFile(ctx, p, "")
			if err != nil {
				pio.stderr([]byte("cat: " + err.Error() + "\n"))
				return 1
			}
			data, _ := io.ReadAll(body)
			pio.stdout(data)
		}
		if len(argv) > 1 || pio.stdin == nil {
			return 0
		}
		return wait(-1, pio.stdin)
	case "sleep":
		secs, err := strconv.ParseFloat(strings.Join(argv[1:], ""), 64)
		if err != nil {
			pio.stderr([]byte("sleep: invalid time interval\n"))
			return 1
		}
		return wait(time.Duration(secs*float64(time.Second)), nil)
	case "echo-server":
		port, err := strconv.Atoi(strings.Join(argv[1:], ""))
		if err != nil {
			pio.stderr([]byte("echo-server: bad port\n"))
			return 2
		}
		s.f.mu.Lock()
		s.listeners[port] = func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		s.f.mu.Unlock()
		defer func() {
			s.f.mu.Lock()
			delete(s.listeners, port)
			s.f.mu.Unlock()
		}()
		return wait(-1, nil)
	case "sh":
		if len(argv) != 3 || argv[1] != "-c" {
			break
		}
		code := 0
		for _, stmt := range strings.Split(argv[2], ";") {
			words := strings.Fields(stmt)
			if len(words) == 0 {
				continue
			}
			if words[0] == "exit" {
				n, _ := strconv.Atoi(strings.Join(words[1:], ""))
				return n
			}
			sub := pio
			if words[len(words)-1] == ">&2" {
				words, sub.stdout = words[:len(words)-1], pio.stderr
			}
			if code = s.run(ctx, words, sub); code > 128 {
				return code
			}
		}
		return code
	}
	pio.stderr([]byte(argv[0] + ": command not found (the fake node imitates only a few commands)\n"))
	return 127
}

func (s *fakeSandbox) session(sid string) (*fakeSession, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	ss, ok := s.sessions[sid]
	if !ok {
		return nil, fmt.Errorf("session %s in %s: %w", sid, s.id, nodeapi.ErrNoSession)
	}
	return ss, nil
}

func (s *fakeSandbox) StartSession(ctx context.Context, spec nodeapi.SessionSpec) (nodeapi.SessionInfo, error) {
	if len(spec.Cmd) == 0 {
		return nodeapi.SessionInfo{}, &nodeapi.AgentError{Status: http.StatusBadRequest, Message: "start session: empty command"}
	}
	s.f.mu.Lock()
	s.nextSID++
	ss := &fakeSession{
		info:    nodeapi.SessionInfo{ID: "s" + strconv.Itoa(s.nextSID), PID: uint32(100 + s.nextSID), Spec: spec, StartedAt: time.Now()},
		limit:   s.f.JournalLimit,
		changed: make(chan struct{}),
		signals: make(chan int, 1),
	}
	if spec.Stdin || spec.TTY {
		ss.stdin = make(chan []byte, 64)
	}
	s.sessions[ss.info.ID] = ss
	s.f.mu.Unlock()

	stdout, stderr := nodeapi.Stdout, nodeapi.Stderr
	if spec.TTY {
		stdout, stderr = nodeapi.PTY, nodeapi.PTY
	}
	output := func(st nodeapi.Stream) func([]byte) {
		return func(p []byte) {
			ss.append(st, p)
			s.activity()
		}
	}
	go func() {
		ctx, cancel := s.alive(context.Background())
		defer cancel()
		code := s.run(ctx, spec.Cmd, procIO{stdout: output(stdout), stderr: output(stderr), stdin: ss.stdin, signals: ss.signals})
		end := nodeapi.End{ExitCode: code}
		if code > 128 {
			end = nodeapi.End{ExitCode: -1, Error: "signal: " + strconv.Itoa(code-128)}
		}
		ss.finish(end)
	}()
	return ss.snapshot(), nil
}

func (s *fakeSandbox) Session(ctx context.Context, sid string) (nodeapi.SessionInfo, error) {
	ss, err := s.session(sid)
	if err != nil {
		return nodeapi.SessionInfo{}, err
	}
	return ss.snapshot(), nil
}

func (s *fakeSandbox) Sessions(ctx context.Context) ([]nodeapi.SessionInfo, error) {
	s.f.mu.Lock()
	list := make([]*fakeSession, 0, len(s.sessions))
	for _, ss := range s.sessions {
		list = append(list, ss)
	}
	s.f.mu.Unlock()
	out := make([]nodeapi.SessionInfo, len(list))
	for i, ss := range list {
		out[i] = ss.snapshot()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func (s *fakeSandbox) Attach(ctx context.Context, sid string, offset int64, dropped func(requested, first int64) error, fn func(nodeapi.Chunk) error) (*nodeapi.End, error) {
	ss, err := s.session(sid)
	if err != nil {
		return nil, err
	}
	return ss.follow(ctx, offset, dropped, fn)
}

func (s *fakeSandbox) WriteStdin(ctx context.Context, sid string, data []byte) error {
	ss, err := s.session(sid)
	if err != nil {
		return err
	}
	return ss.write(ctx, data)
}

func (s *fakeSandbox) CloseStdin(ctx context.Context, sid string) error {
	ss, err := s.session(sid)
	if err != nil {
		return err
	}
	ss.closeStdin()
	return nil
}

func (s *fakeSandbox) Signal(ctx context.Context, sid string, signal int) error {
	ss, err := s.session(sid)
	if err != nil {
		return err
	}
	select {
	case ss.signals <- signal:
	default: // one is pending already
	}
	return nil
}

func (s *fakeSandbox) Resize(ctx context.Context, sid string, cols, rows uint32) error {
	ss, err := s.session(sid)
	if err != nil {
		return err
	}
	if !ss.info.Spec.TTY {
		return &nodeapi.AgentError{Status: http.StatusBadRequest, Message: "resize: session " + sid + " has no terminal"}
	}
	return nil
}

func (s *fakeSandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial sandbox %s: port %d out of range", s.id, port)
	}
	s.f.mu.Lock()
	serve, ok := s.listeners[port]
	s.f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial sandbox %s port %d: connection refused", s.id, port)
	}
	client, server := net.Pipe()
	go serve(server)
	// Like a node's, the connection ends when the sandbox stops.
	go func() {
		<-s.done
		client.Close()
		server.Close()
	}()
	return client, nil
}

// Agent answers GET /files?path=... (the file's content) for requests
// bearing the sandbox's access token in X-Access-Token, as envd does.
func (s *fakeSandbox) Agent() http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil {
			defer req.Body.Close()
			_, _ = io.Copy(io.Discard, req.Body)
		}
		rec := httptest.NewRecorder()
		s.f.mu.Lock()
		token := s.token
		s.f.mu.Unlock()
		fail := func(status int, msg string) {
			rec.Header().Set("Content-Type", "application/json")
			rec.WriteHeader(status)
			_ = json.NewEncoder(rec).Encode(map[string]any{"code": status, "message": msg})
		}
		switch {
		case token != "" && req.Header.Get("X-Access-Token") != token:
			fail(http.StatusUnauthorized, "invalid access token")
		case req.URL.Path == "/files" && req.Method == http.MethodGet:
			body, _, err := s.ReadFile(req.Context(), req.URL.Query().Get("path"), req.URL.Query().Get("username"))
			if err != nil {
				status := http.StatusInternalServerError
				if ae, ok := err.(*nodeapi.AgentError); ok {
					status = ae.Status
				}
				fail(status, err.Error())
				break
			}
			rec.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.Copy(rec, body)
		default:
			fail(http.StatusNotFound, "no route "+req.URL.Path)
		}
		return rec.Result(), nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fakeSession is a running or ended imitated process and its journal.
type fakeSession struct {
	stdin   chan []byte
	signals chan int

	mu          sync.Mutex
	info        nodeapi.SessionInfo
	limit       int
	chunks      []nodeapi.Chunk
	held        int
	stdinClosed bool
	changed     chan struct{}
}

func (ss *fakeSession) notifyLocked() {
	close(ss.changed)
	ss.changed = make(chan struct{})
}

func (ss *fakeSession) append(st nodeapi.Stream, p []byte) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.chunks = append(ss.chunks, nodeapi.Chunk{Stream: st, Offset: ss.info.OutputBytes, Data: append([]byte(nil), p...)})
	ss.info.OutputBytes += int64(len(p))
	ss.held += len(p)
	for ss.limit > 0 && ss.held > ss.limit && len(ss.chunks) > 1 {
		ss.held -= len(ss.chunks[0].Data)
		ss.chunks = ss.chunks[1:]
		ss.info.DroppedBytes = ss.chunks[0].Offset
	}
	ss.notifyLocked()
}

func (ss *fakeSession) finish(end nodeapi.End) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.info.End, ss.info.EndedAt = &end, time.Now()
	ss.notifyLocked()
}

func (ss *fakeSession) snapshot() nodeapi.SessionInfo {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.info
}

func (ss *fakeSession) follow(ctx context.Context, offset int64, dropped func(requested, first int64) error, fn func(nodeapi.Chunk) error) (*nodeapi.End, error) {
	reported := false
	for {
		ss.mu.Lock()
		if offset < ss.info.DroppedBytes && !reported {
			reported = true
			first := ss.info.DroppedBytes
			ss.mu.Unlock()
			if dropped != nil {
				if err := dropped(offset, first); err != nil {
					return nil, err
				}
			}
			offset = first
			continue
		}
		var out []nodeapi.Chunk
		for _, c := range ss.chunks {
			if end := c.Offset + int64(len(c.Data)); end > offset {
				if c.Offset < offset {
					c = nodeapi.Chunk{Stream: c.Stream, Offset: offset, Data: c.Data[offset-c.Offset:]}
				}
				out = append(out, c)
			}
		}
		end, changed := ss.info.End, ss.changed
		ss.mu.Unlock()
		for _, c := range out {
			if err := fn(c); err != nil {
				return nil, err
			}
			offset = c.Offset + int64(len(c.Data))
		}
		if end != nil {
			e := *end
			return &e, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (ss *fakeSession) write(ctx context.Context, data []byte) error {
	ss.mu.Lock()
	closed := ss.stdinClosed || ss.stdin == nil || ss.info.End != nil
	ss.mu.Unlock()
	if closed {
		return &nodeapi.AgentError{Status: http.StatusBadRequest, Message: "session " + ss.info.ID + " takes no input"}
	}
	select {
	case ss.stdin <- append([]byte(nil), data...):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ss *fakeSession) closeStdin() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stdin != nil && !ss.stdinClosed {
		ss.stdinClosed = true
		close(ss.stdin)
	}
}

// tree is a sandbox's file system: nodes by clean absolute path.
type tree struct {
	mu    sync.Mutex
	nodes map[string]*fnode
}

type fnode struct {
	dir   bool
	data  []byte
	mtime time.Time
}

func newTree() *tree {
	now := time.Now()
	return &tree{nodes: map[string]*fnode{
		"/": {dir: true, mtime: now}, "/tmp": {dir: true, mtime: now}, "/home": {dir: true, mtime: now}, "/home/user": {dir: true, mtime: now},
	}}
}

func (t *tree) copy() *tree {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &tree{nodes: make(map[string]*fnode, len(t.nodes))}
	for p, n := range t.nodes {
		c := *n
		out.nodes[p] = &c // data is never changed in place
	}
	return out
}

func (t *tree) size() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, f := range t.nodes {
		n += int64(len(f.data))
	}
	return n
}

func agentErr(status int, format string, args ...any) error {
	return &nodeapi.AgentError{Status: status, Message: fmt.Sprintf(format, args...)}
}

func clean(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", agentErr(http.StatusBadRequest, "path %q is not absolute", p)
	}
	return path.Clean(p), nil
}

func (t *tree) entry(p string, n *fnode) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{Name: path.Base(p), Path: p, Size: int64(len(n.data)), Owner: "user", Group: "user", ModifiedTime: timestamppb.New(n.mtime)}
	if n.dir {
		e.Type, e.Mode, e.Permissions = filesystempb.FileType_FILE_TYPE_DIRECTORY, 0o20000000755, "drwxr-xr-x"
	} else {
		e.Type, e.Mode, e.Permissions = filesystempb.FileType_FILE_TYPE_FILE, 0o644, "-rw-r--r--"
	}
	return e
}

// mkdirAllLocked makes p and its parents directories; t.mu is held.
func (t *tree) mkdirAllLocked(p string) error {
	if n, ok := t.nodes[p]; ok {
		if !n.dir {
			return agentErr(http.StatusBadRequest, "%s is not a directory", p)
		}
		return nil
	}
	if err := t.mkdirAllLocked(path.Dir(p)); err != nil {
		return err
	}
	t.nodes[p] = &fnode{dir: true, mtime: time.Now()}
	return nil
}

// inTree runs fn on the sandbox's file tree, locked, with p made clean.
func (s *fakeSandbox) inTree(p string, fn func(t *tree, p string) error) error {
	p, err := clean(p)
	if err != nil {
		return err
	}
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	return fn(s.fs, p)
}

func missing(p string) error {
	return agentErr(http.StatusNotFound, "%s: no such file or directory", p)
}

func (s *fakeSandbox) ReadFile(ctx context.Context, p, user string) (body io.ReadCloser, size int64, err error) {
	err = s.inTree(p, func(t *tree, p string) error {
		n, ok := t.nodes[p]
		switch {
		case !ok:
			return missing(p)
		case n.dir:
			return agentErr(http.StatusBadRequest, "%s is a directory", p)
		}
		body, size = io.NopCloser(bytes.NewReader(n.data)), int64(len(n.data))
		return nil
	})
	return body, size, err
}

func (s *fakeSandbox) WriteFile(ctx context.Context, p, user string, body io.Reader) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return s.inTree(p, func(t *tree, p string) error {
		if n, ok := t.nodes[p]; ok && n.dir {
			return agentErr(http.StatusBadRequest, "%s is a directory", p)
		}
		if err := t.mkdirAllLocked(path.Dir(p)); err != nil {
			return err
		}
		t.nodes[p] = &fnode{data: data, mtime: time.Now()}
		return nil
	})
}

func (s *fakeSandbox) Stat(ctx context.Context, p, user string) (e *filesystempb.EntryInfo, err error) {
	err = s.inTree(p, func(t *tree, p string) error {
		n, ok := t.nodes[p]
		if !ok {
			return missing(p)
		}
		e = t.entry(p, n)
		return nil
	})
	return e, err
}

// below reports whether p lies under dir, and how deep.
func below(dir, p string) (int, bool) {
	if dir == p {
		return 0, false
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if !strings.HasPrefix(p, prefix) {
		return 0, false
	}
	return strings.Count(p[len(prefix):], "/") + 1, true
}

func (s *fakeSandbox) List(ctx context.Context, p, user string, opts nodeapi.ListOptions) (page nodeapi.DirPage, err error) {
	err = s.inTree(p, func(t *tree, p string) error {
		page, err = t.listLocked(p, opts)
		return err
	})
	return page, err
}

// listLocked reads one page of a listing of directory p (clean); t.mu is
// held. The cursor is the path of the previous page's last entry.
func (t *tree) listLocked(p string, opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
	depth, limit := max(opts.Depth, 1), opts.Limit
	if limit <= 0 {
		limit = 1000
	}
	n, ok := t.nodes[p]
	switch {
	case !ok:
		return nil, missing(p)
	case !n.dir:
		return nil, agentErr(http.StatusBadRequest, "%s is not a directory", p)
	}
	var paths []string
	for q := range t.nodes {
		if d, ok := below(p, q); ok && d <= depth && q > opts.Cursor {
			paths = append(paths, q)
		}
	}
	sort.Strings(paths)
	page := &fakePage{}
	if len(paths) > limit {
		paths = paths[:limit]
		page.cursor = paths[limit-1]
	}
	for _, q := range paths {
		page.entries = append(page.entries, t.entry(q, t.nodes[q]))
	}
	return page, nil
}

type fakePage struct {
	entries []*filesystempb.EntryInfo
	cursor  string
}

func (p *fakePage) Next() (*filesystempb.EntryInfo, error) {
	if len(p.entries) == 0 {
		return nil, io.EOF
	}
	e := p.entries[0]
	p.entries = p.entries[1:]
	return e, nil
}

func (p *fakePage) NextCursor() string { return p.cursor }
func (p *fakePage) Close() error       { return nil }

func (s *fakeSandbox) Remove(ctx context.Context, p, user string) error {
	return s.inTree(p, func(t *tree, p string) error {
		if _, ok := t.nodes[p]; !ok {
			return missing(p)
		}
		for q := range t.nodes {
			if _, ok := below(p, q); ok || q == p {
				delete(t.nodes, q)
			}
		}
		return nil
	})
}

func (s *fakeSandbox) MakeDir(ctx context.Context, p, user string) (e *filesystempb.EntryInfo, err error) {
	err = s.inTree(p, func(t *tree, p string) error {
		if _, ok := t.nodes[p]; ok {
			return agentErr(http.StatusConflict, "%s already exists", p)
		}
		if err := t.mkdirAllLocked(p); err != nil {
			return err
		}
		e = t.entry(p, t.nodes[p])
		return nil
	})
	return e, err
}

func (s *fakeSandbox) Move(ctx context.Context, from, to, user string) (e *filesystempb.EntryInfo, err error) {
	to, err = clean(to)
	if err != nil {
		return nil, err
	}
	err = s.inTree(from, func(t *tree, from string) error {
		if _, ok := t.nodes[from]; !ok {
			return missing(from)
		}
		if err := t.mkdirAllLocked(path.Dir(to)); err != nil {
			return err
		}
		moved := map[string]*fnode{}
		for q, n := range t.nodes {
			if _, ok := below(from, q); ok || q == from {
				moved[to+q[len(from):]] = n
				delete(t.nodes, q)
			}
		}
		for q, n := range moved {
			t.nodes[q] = n
		}
		e = t.entry(to, t.nodes[to])
		return nil
	})
	return e, err
}

var _ nodeapi.Transfer = (*Fake)(nil)

// A fake's volume or image crosses as the JSON of its file tree.
type wireFile struct {
	Path  string    `json:"path"`
	Dir   bool      `json:"dir,omitempty"`
	Data  []byte    `json:"data,omitempty"`
	MTime time.Time `json:"mtime"`
}

func (t *tree) encode(w io.Writer) error {
	t.mu.Lock()
	files := make([]wireFile, 0, len(t.nodes))
	for p, n := range t.nodes {
		files = append(files, wireFile{Path: p, Dir: n.dir, Data: n.data, MTime: n.mtime})
	}
	t.mu.Unlock()
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return json.NewEncoder(w).Encode(files)
}

func decodeTree(r io.Reader) (*tree, error) {
	var files []wireFile
	if err := json.NewDecoder(r).Decode(&files); err != nil {
		return nil, err
	}
	t := &tree{nodes: map[string]*fnode{}}
	for _, f := range files {
		t.nodes[f.Path] = &fnode{dir: f.Dir, data: f.Data, mtime: f.MTime}
	}
	return t, nil
}

// send writes the tree store holds under name.
func (f *Fake) send(op string, store map[string]*tree, name string, w io.Writer) error {
	var t *tree
	if err := f.named(op, name, func() { t = store[name] }); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("%s %s: it does not exist", op, name)
	}
	return t.encode(w)
}

// receive reads a tree into store under name, which it never replaces.
func (f *Fake) receive(op string, store map[string]*tree, name string, r io.Reader) error {
	exists := false
	if err := f.named(op, name, func() { _, exists = store[name] }); err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("%s %s: %w", op, name, nodeapi.ErrExists)
	}
	t, err := decodeTree(r)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := store[name]; ok {
		return fmt.Errorf("%s %s: %w", op, name, nodeapi.ErrExists)
	}
	store[name] = t
	return nil
}

// rootVolume is the sandbox whose root volume name names, as a node
// names them ("sandboxes/<id>"); the fake keeps those apart, by sandbox.
func rootVolume(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, "sandboxes/")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// volumeStore is the map that holds volume name, by the key it has there.
func (f *Fake) volumeStore(name string) (map[string]*tree, string) {
	if id, ok := rootVolume(name); ok {
		return f.disks, id
	}
	return f.volumes, name
}

func (f *Fake) SendVolume(ctx context.Context, name string, w io.Writer) error {
	if err := nodeapi.ValidName(name); err != nil {
		return fmt.Errorf("send volume: %w", err)
	}
	store, key := f.volumeStore(name)
	return f.send("send volume", store, key, w)
}

func (f *Fake) ReceiveVolume(ctx context.Context, req nodeapi.ReceiveVolumeRequest, r io.Reader) error {
	if err := nodeapi.ValidName(req.Name); err != nil {
		return fmt.Errorf("receive volume: %w", err)
	}
	store, key := f.volumeStore(req.Name)
	return f.receive("receive volume", store, key, r)
}

func (f *Fake) SendImage(ctx context.Context, image string, w io.Writer) error {
	return f.send("send image", f.images, image, w)
}

func (f *Fake) ReceiveImage(ctx context.Context, image string, r io.Reader) error {
	return f.receive("receive image", f.images, image, r)
}

var _ nodeapi.Templates = (*Fake)(nil)

// FakeRecipeFails, anywhere in a recipe, makes the fake's BuildTemplate
// fail after a line of log, as a build whose step fails does.
const FakeRecipeFails = "fake-build-fails"

// BuildTemplate imitates a build: it logs two lines and files the recipe
// as /recipe in the root volume templates/<id>, whose id is a hash of the
// recipe (equal recipes are one template, as on a node).
func (f *Fake) BuildTemplate(ctx context.Context, req nodeapi.TemplateBuildRequest, logs io.Writer) (nodeapi.TemplateBuilt, error) {
	if logs == nil {
		logs = io.Discard
	}
	fmt.Fprintf(logs, "building %s\n", req.Name)
	f.mu.Lock()
	f.lastBuild = req
	f.mu.Unlock()
	if strings.Contains(string(req.Recipe), FakeRecipeFails) {
		return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: step 1 failed", req.Name)
	}
	var archive []byte
	if req.Archive != "" {
		f.mu.Lock()
		archive = f.archives[req.Archive]
		delete(f.archives, req.Archive)
		f.mu.Unlock()
		if archive == nil {
			return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: no staged archive %q", req.Name, req.Archive)
		}
	}
	// Copy archives are consumed too; each is filed as /files/<hash>.
	files := map[string][]byte{}
	for hash, handle := range req.CopyArchives {
		f.mu.Lock()
		data, ok := f.archives[handle]
		delete(f.archives, handle)
		f.mu.Unlock()
		if !ok {
			return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: files %s: no staged archive %q", req.Name, hash, handle)
		}
		files[hash] = data
	}
	content := append(append([]byte(nil), req.Recipe...), archive...)
	for _, hash := range slices.Sorted(maps.Keys(files)) {
		content = append(append(content, hash...), files[hash]...)
	}
	sum := sha256.Sum256(content)
	id := "fake-" + hex.EncodeToString(sum[:8])
	spec := nodeapi.TemplateSpec{ID: id, RootfsVolume: "templates/" + id}
	t := newTree()
	t.nodes["/recipe"] = &fnode{data: append([]byte(nil), req.Recipe...), mtime: time.Now()}
	if archive != nil {
		t.nodes["/archive"] = &fnode{data: archive, mtime: time.Now()}
	}
	if len(files) > 0 {
		t.nodes["/files"] = &fnode{dir: true, mtime: time.Now()}
	}
	for hash, data := range files {
		t.nodes["/files/"+hash] = &fnode{data: data, mtime: time.Now()}
	}
	f.mu.Lock()
	if _, ok := f.volumes[spec.RootfsVolume]; !ok {
		f.volumes[spec.RootfsVolume] = t
	}
	f.mu.Unlock()
	fmt.Fprintf(logs, "template %s ready (id %s)\n", req.Name, id)
	return nodeapi.TemplateBuilt{Spec: spec, SizeBytes: t.size()}, nil
}

// LastTemplateBuild is the last build request the fake took, so that a
// test sees what reached the node (registry credentials among it).
func (f *Fake) LastTemplateBuild() nodeapi.TemplateBuildRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastBuild
}

// DeleteTemplate deletes the template's root volume.
func (f *Fake) DeleteTemplate(ctx context.Context, id string) error {
	return f.named("delete template", id, func() { delete(f.volumes, "templates/"+id) })
}

// DiscardTemplateArchive drops a staged archive.
func (f *Fake) DiscardTemplateArchive(ctx context.Context, handle string) error {
	if !strings.HasPrefix(handle, "archive-") || nodeapi.ValidName(handle) != nil {
		return fmt.Errorf("discard template archive: %w: %q", nodeapi.ErrInvalidName, handle)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.archives, handle)
	return nil
}

// StagedArchives counts the archives staged and not yet consumed, so that
// a test sees none is left behind.
func (f *Fake) StagedArchives() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.archives)
}

// StageTemplateArchive keeps the archive in memory for the build that
// names it.
func (f *Fake) StageTemplateArchive(ctx context.Context, r io.Reader, limit int64) (string, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		// As the real node, which does not pass a read's cause on.
		return "", fmt.Errorf("stage template archive: %v", err)
	}
	if int64(len(data)) > limit {
		return "", fmt.Errorf("stage template archive: over the limit of %d bytes", limit)
	}
	handle := "archive-" + sandboxid.New()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.archives == nil {
		f.archives = map[string][]byte{}
	}
	f.archives[handle] = data
	return handle, nil
}
