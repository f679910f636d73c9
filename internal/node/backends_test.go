package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// fakeBackend is a runtime.Runtime that runs nothing: it remembers which
// sandboxes it holds, answers the agent's /health and /init, and writes
// images only it restores. Two of them side by side show which backend
// the node sends each call to.
type fakeBackend struct {
	name, isolation string

	mu       sync.Mutex
	status   map[string]runtime.Status
	limits   map[string]runtime.Limits
	ended    map[string]chan struct{}
	started  []string
	restored []string
	specs    map[string]runtime.Spec // the last each sandbox ran with
	// dies, when set, ends every sandbox right after its start, for that
	// reason, before its agent ever answers (a guest that dies booting).
	dies runtime.ExitReason
}

func newFakeBackend(name, isolation string) *fakeBackend {
	return &fakeBackend{name: name, isolation: isolation, status: map[string]runtime.Status{},
		limits: map[string]runtime.Limits{}, ended: map[string]chan struct{}{}, specs: map[string]runtime.Spec{}}
}

func (f *fakeBackend) imageMark() string { return "fake-image-of-" + f.name }

func (f *fakeBackend) run(spec runtime.Spec) {
	f.status[spec.ID] = runtime.StatusRunning
	f.limits[spec.ID] = spec.Limits
	f.ended[spec.ID] = make(chan struct{})
	f.specs[spec.ID] = spec
	if f.dies != "" {
		close(f.ended[spec.ID])
	}
}

func (f *fakeBackend) specOf(id string) runtime.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.specs[id]
}

// blockBackend is a fakeBackend that boots from a disk image
// (runtime.BlockRootfs), cloned here by a plain copy.
type blockBackend struct{ *fakeBackend }

func (blockBackend) RootImage() string { return "root.img" }

func (blockBackend) CloneRootImage(_ context.Context, src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o600)
}

func (f *fakeBackend) Start(_ context.Context, spec runtime.Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.status[spec.ID]; ok {
		return fmt.Errorf("%s: %s already exists", f.name, spec.ID)
	}
	f.run(spec)
	f.started = append(f.started, spec.ID)
	return nil
}

func (f *fakeBackend) Restore(_ context.Context, spec runtime.Spec, imageDir string) error {
	if _, err := os.Stat(filepath.Join(imageDir, f.imageMark())); err != nil {
		return fmt.Errorf("%s: not an image of mine: %w", f.name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.run(spec)
	f.restored = append(f.restored, spec.ID)
	return nil
}

func (f *fakeBackend) Checkpoint(_ context.Context, id, imageDir string, leaveRunning bool) error {
	if _, err := f.State(context.Background(), id); err != nil {
		return err
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageDir, f.imageMark()), nil, 0o600)
}

func (f *fakeBackend) setStatus(id string, s runtime.Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.status[id]; !ok {
		return runtime.ErrNotFound
	}
	f.status[id] = s
	return nil
}

func (f *fakeBackend) Pause(_ context.Context, id string) error {
	return f.setStatus(id, runtime.StatusPaused)
}
func (f *fakeBackend) Resume(_ context.Context, id string) error {
	return f.setStatus(id, runtime.StatusRunning)
}

func (f *fakeBackend) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.ended[id]; ok {
		select {
		case <-ch: // ended already (dies)
		default:
			close(ch)
		}
	}
	delete(f.status, id)
	delete(f.limits, id)
	delete(f.ended, id)
	return nil
}

func (f *fakeBackend) State(_ context.Context, id string) (runtime.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.status[id]
	if !ok {
		return runtime.State{}, runtime.ErrNotFound
	}
	return runtime.State{Status: s, PID: 1}, nil
}

func (f *fakeBackend) List(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.status {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (f *fakeBackend) holds(id string) bool {
	_, err := f.State(context.Background(), id)
	return err == nil
}

func (f *fakeBackend) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{}, nil
}

// DialAgent serves a stand-in agent on one end of a pipe: /health and
// /init succeed, everything else is 404 (the node only logs those).
func (f *fakeBackend) DialAgent(_ context.Context, id string) (net.Conn, error) {
	if !f.holds(id) {
		return nil, fmt.Errorf("%s: dial %s: %w", f.name, id, runtime.ErrNotFound)
	}
	if f.dies != "" {
		return nil, fmt.Errorf("%s: dial %s: connection refused", f.name, id)
	}
	client, server := net.Pipe()
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	mux.HandleFunc("/health", ok)
	mux.HandleFunc("/init", ok)
	go (&http2.Server{}).ServeConn(server, &http2.ServeConnOpts{Handler: mux})
	return client, nil
}

func (f *fakeBackend) Wait(ctx context.Context, id string) (runtime.ExitReason, error) {
	f.mu.Lock()
	ch, ok := f.ended[id]
	f.mu.Unlock()
	if !ok {
		return runtime.ExitDied, nil
	}
	select {
	case <-ch:
		if f.dies != "" {
			return f.dies, nil
		}
		return runtime.ExitDied, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (f *fakeBackend) Limits(id string) (runtime.Limits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.limits[id]
	if !ok {
		return runtime.Limits{}, runtime.ErrNotFound
	}
	return l, nil
}

func (f *fakeBackend) Quiesce(context.Context, string) error { return nil }
func (f *fakeBackend) Isolation() string                     { return f.isolation }

// dirVolumes keeps volumes as plain directories: enough for the node's
// lifecycle steps when the runtime is a fake.
type dirVolumes struct{ root string }

func (v dirVolumes) Path(name string) string { return filepath.Join(v.root, filepath.FromSlash(name)) }
func (v dirVolumes) Snapshot(_, dst string, _ bool) (string, error) {
	return v.Create(dst)
}
func (v dirVolumes) Create(name string) (string, error) {
	return v.Path(name), os.MkdirAll(v.Path(name), 0o755)
}
func (v dirVolumes) Delete(name string) error          { return os.RemoveAll(v.Path(name)) }
func (v dirVolumes) SetLimit(string, int64) error      { return nil }
func (v dirVolumes) SetWriteLimit(string, int64) error { return nil }
func (v dirVolumes) Usage(string) (int64, error)       { return 0, nil }
func (v dirVolumes) Sync(string) error                 { return nil }
func (v dirVolumes) Rename(src, dst string) error      { return os.Rename(v.Path(src), v.Path(dst)) }
func (v dirVolumes) Exists(name string) bool           { _, err := os.Stat(v.Path(name)); return err == nil }
func (v dirVolumes) List(prefix string) ([]string, error) {
	entries, err := os.ReadDir(v.Path(prefix))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, prefix+"/"+e.Name())
	}
	return out, err
}

// twoBackendNode is a node on state with a gVisor stand-in and a second
// backend, "fakevm".
type twoBackendNode struct {
	state, volumes string
	ns             *network.Namespaces
	gvisor, vm     *fakeBackend
	// block makes fakevm a backend that boots from a disk image.
	block bool
	// sized makes fakevm a backend whose restores keep the boot's size.
	sized bool
}

func newTwoBackendNode(t *testing.T) *twoBackendNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the network namespace directory is a mount: needs root")
	}
	dir := t.TempDir()
	ns, err := network.OpenNamespaces(filepath.Join(dir, "netns"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return &twoBackendNode{
		state: filepath.Join(dir, "state"), volumes: filepath.Join(dir, "volumes"), ns: ns,
		gvisor: newFakeBackend(runtime.GVisor, runtime.IsolationGVisor),
		vm:     newFakeBackend("fakevm", runtime.IsolationMicroVMTCG),
	}
}

// start makes a node object on the state, as a (re)started server does.
func (tb *twoBackendNode) start(t *testing.T) *Node {
	t.Helper()
	agent := filepath.Join(tb.state, "agent-src")
	if err := os.MkdirAll(tb.state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var vm runtime.Runtime = tb.vm
	if tb.block {
		vm = blockBackend{tb.vm}
	}
	if tb.sized {
		vm = sizedBackend{tb.vm}
	}
	n, err := New(Config{
		Runtimes:    map[string]runtime.Runtime{runtime.GVisor: tb.gvisor, "fakevm": vm},
		Volumes:     dirVolumes{root: tb.volumes},
		AgentBinary: agent, StateDir: tb.state, Namespaces: tb.ns, Logger: slog.Default(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A template built for two backends runs each sandbox on the one its
// create names (its default otherwise), keeps a sandbox on its backend
// through snapshots, branches, suspend and resume and a restart of the
// node, and never restores one backend's image with the other.
func TestSandboxesKeepTheirBackend(t *testing.T) {
	tb := newTwoBackendNode(t)
	n := tb.start(t)
	ctx := context.Background()
	tpl := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.GVisor, "fakevm"}}
	if _, err := n.cfg.Volumes.Create(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	const onG, onVM, branch = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccc"
	create := func(id, rt string) error {
		return n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: id, Template: tpl, AccessToken: "t", Runtime: rt,
			Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}, Warm: true})
	}
	if err := create(onG, ""); err != nil {
		t.Fatalf("create on the default runtime: %v", err)
	}
	if err := create(onVM, "fakevm"); err != nil {
		t.Fatalf("create on fakevm: %v", err)
	}
	if !tb.gvisor.holds(onG) || tb.vm.holds(onG) || !tb.vm.holds(onVM) || tb.gvisor.holds(onVM) {
		t.Fatalf("gvisor holds %v, fakevm %v; want %s on gvisor (the default) and %s on fakevm", tb.gvisor.status, tb.vm.status, onG, onVM)
	}
	info, err := n.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Runtimes[runtime.GVisor] != runtime.IsolationGVisor || info.Runtimes["fakevm"] != runtime.IsolationMicroVMTCG {
		t.Fatalf("Info.Runtimes = %v; want each backend's isolation", info.Runtimes)
	}

	// Pause goes to the sandbox's backend.
	if err := n.Pause(ctx, onVM); err != nil {
		t.Fatal(err)
	}
	if p, _ := n.Paused(ctx, onVM); !p {
		t.Fatal("the fakevm sandbox is not paused after Pause")
	}
	if err := n.Resume(ctx, onVM); err != nil {
		t.Fatal(err)
	}

	// A snapshot of the fakevm sandbox, and a branch of it: restored by
	// fakevm, whose image it is.
	if err := n.Capture(ctx, nodeapi.CaptureRequest{ID: onVM, Volume: "snapshots/s1", Image: "snapshots/s1"}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	restore := func(id, rt string) error {
		return n.ResumeFrom(ctx, RestoreSpec{ID: id, Image: "snapshots/s1", FromVolume: "snapshots/s1", AccessToken: "t", Runtime: rt,
			NewIdentity: &Identity{AccessToken: "t2"}, Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}})
	}
	err = restore("dddddddddddddddddddd", runtime.GVisor)
	if !errors.Is(err, nodeapi.ErrNoRuntime) || !strings.Contains(err.Error(), "taken under the fakevm runtime") {
		t.Fatalf("restore of a fakevm image asking for gvisor: %v; want a refusal naming the image's runtime", err)
	}
	if tb.gvisor.holds("dddddddddddddddddddd") {
		t.Fatal("gvisor restored a fakevm image")
	}
	if err := restore(branch, ""); err != nil {
		t.Fatalf("branch: %v", err)
	}
	if !slices.Contains(tb.vm.restored, branch) || tb.gvisor.holds(branch) {
		t.Fatalf("the branch of a fakevm sandbox is not on fakevm (fakevm restored %v)", tb.vm.restored)
	}

	// Suspend and resume in place keep the backend.
	if err := n.Suspend(ctx, onVM, "suspend/"+onVM); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if tb.vm.holds(onVM) {
		t.Fatal("the suspended sandbox still runs")
	}
	if err := n.ResumeFrom(ctx, RestoreSpec{ID: onVM, Image: "suspend/" + onVM, AccessToken: "t", Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if !tb.vm.holds(onVM) || tb.gvisor.holds(onVM) {
		t.Fatal("the resumed sandbox is not back on fakevm")
	}

	// A restarted node lists every backend's sandboxes and adopts each
	// through its own.
	n2 := tb.start(t)
	ids, err := n2.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{onG, onVM, branch}; !slices.Equal(ids, want) {
		t.Fatalf("Sandboxes after a restart = %v, want %v", ids, want)
	}
	for _, id := range ids {
		adopted, err := n2.Adopt(ctx, id, "t")
		if err != nil || !adopted {
			t.Fatalf("adopt %s after a restart: %v, %v; want adopted through its backend", id, adopted, err)
		}
	}
	if err := n2.Pause(ctx, branch); err != nil {
		t.Fatalf("pause of an adopted fakevm sandbox: %v", err)
	}
	if st, _ := tb.vm.State(ctx, branch); st.Status != runtime.StatusPaused {
		t.Fatalf("the adopted branch is %s on fakevm after Pause", st.Status)
	}

	// Sweep goes over both backends: what no sandbox keeps goes.
	if err := n2.Sweep(ctx, []string{onG}); err != nil {
		t.Fatal(err)
	}
	if !tb.gvisor.holds(onG) || tb.vm.holds(onVM) || tb.vm.holds(branch) {
		t.Fatalf("after a sweep keeping %s: gvisor holds %v, fakevm %v", onG, tb.gvisor.status, tb.vm.status)
	}
	// A runtime record whose sandbox has nothing else left goes too.
	if err := n2.recordRuntime("eeeeeeeeeeeeeeeeeeee", "fakevm"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Sweep(ctx, []string{onG}); err != nil {
		t.Fatal(err)
	}
	if got := n2.recordedRuntimeIDs(); !slices.Equal(got, []string{onG}) {
		t.Fatalf("runtime records after a sweep keeping %s: %v", onG, got)
	}
	if err := n2.Destroy(ctx, onG); err != nil {
		t.Fatal(err)
	}
	if tb.gvisor.holds(onG) {
		t.Fatal("destroy left the gvisor sandbox")
	}
}

// A create names a backend the template was not built for, or one the
// node does not have: refused, saying which.
func TestCreateRefusesAMissingBackend(t *testing.T) {
	tb := newTwoBackendNode(t)
	n := tb.start(t)
	ctx := context.Background()
	gOnly := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl"}
	err := n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: "aaaaaaaaaaaaaaaaaaaa", Template: gOnly, Runtime: "fakevm"}})
	if !errors.Is(err, nodeapi.ErrNoRuntime) || !strings.Contains(err.Error(), "has no fakevm runtime (it has gvisor)") {
		t.Fatalf("create on a runtime the template lacks: %v", err)
	}
	both := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.MicroVM, runtime.GVisor}}
	err = n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: "aaaaaaaaaaaaaaaaaaaa", Template: both}})
	if !errors.Is(err, nodeapi.ErrNoRuntime) || !strings.Contains(err.Error(), "this node has no microvm runtime") {
		t.Fatalf("create on the template's default, microvm, which the node lacks: %v", err)
	}
	if len(tb.gvisor.started)+len(tb.vm.started) != 0 {
		t.Fatal("a refused create started a sandbox")
	}
}

// A backend that boots from a disk image gets a root volume holding a
// clone of the template's image of it, as a block rootfs, at create and at
// a branch's restore; a template built without that image is refused with
// the reason.
func TestBlockBackendBootsAClonedImage(t *testing.T) {
	tb := newTwoBackendNode(t)
	tb.block = true
	n := tb.start(t)
	ctx := context.Background()
	tpl := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.GVisor, "fakevm"}}
	if _, err := n.cfg.Volumes.Create(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	create := func(id string) error {
		return n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: id, Template: tpl, AccessToken: "t", Runtime: "fakevm",
			Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}})
	}
	const first, second, branch = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccc"
	if err := create(first); err == nil || !strings.Contains(err.Error(), "has no fakevm image") {
		t.Fatalf("create without the template's image: %v; want a refusal naming it", err)
	}
	if n.cfg.Volumes.Exists(volumeName(first)) {
		t.Fatal("a refused create left its root volume")
	}
	artifact, err := n.cfg.Volumes.Create(tpl.ArtifactVolume("fakevm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(artifact, "root.img"), []byte("ext4 image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := create(second); err != nil {
		t.Fatalf("create: %v", err)
	}
	spec := tb.vm.specOf(second)
	want := filepath.Join(n.cfg.Volumes.Path(volumeName(second)), "root.img")
	if spec.Rootfs != (runtime.Rootfs{Kind: runtime.RootfsBlock, Path: want}) {
		t.Fatalf("the sandbox booted from %+v, want the image in its volume %s", spec.Rootfs, want)
	}
	if data, err := os.ReadFile(want); err != nil || string(data) != "ext4 image" {
		t.Fatalf("the sandbox's image holds %q, %v; want the template's", data, err)
	}
	if err := n.Capture(ctx, nodeapi.CaptureRequest{ID: second, Volume: "snapshots/s1", Image: "snapshots/s1"}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	if err := n.ResumeFrom(ctx, RestoreSpec{ID: branch, Image: "snapshots/s1", FromVolume: "snapshots/s1", AccessToken: "t",
		NewIdentity: &Identity{AccessToken: "t2"}, Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}); err != nil {
		t.Fatalf("branch: %v", err)
	}
	want = filepath.Join(n.cfg.Volumes.Path(volumeName(branch)), "root.img")
	if got := tb.vm.specOf(branch).Rootfs; got != (runtime.Rootfs{Kind: runtime.RootfsBlock, Path: want}) {
		t.Fatalf("the branch restored onto %+v, want the image in its volume %s", got, want)
	}
	if got := tb.gvisor.specs; len(got) != 0 {
		t.Fatalf("gvisor ran %v", got)
	}
}

// A sandbox whose backend reports it ended while its agent was starting
// (a guest killed for its memory as it booted) fails its create with that
// reason at once, rather than after polling a dead channel until the
// start timeout, and leaves nothing on its backend.
func TestStartThatDiesFailsWithTheReason(t *testing.T) {
	tb := newTwoBackendNode(t)
	tb.vm.dies = runtime.ExitOOM
	n := tb.start(t)
	tpl := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.GVisor, "fakevm"}}
	if _, err := n.cfg.Volumes.Create(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	const id = "dddddddddddddddddddd"
	ctx, cancel := context.WithTimeout(context.Background(), agentStartTimeout/2)
	defer cancel()
	err := n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: id, Template: tpl, AccessToken: "t", Runtime: "fakevm",
		Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}})
	if err == nil || !strings.Contains(err.Error(), "ended before its agent answered (oom)") {
		t.Fatalf("create of a sandbox that dies booting: %v; want it to say it ended (oom)", err)
	}
	if tb.vm.holds(id) {
		t.Fatal("the failed create left its sandbox on the backend")
	}
}
