package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// drainNode is an in-memory node (nodeapitest's fake) whose image
// receives can be made to fail or to hang.
type drainNode struct {
	*nodeapitest.Fake
	mu sync.Mutex
	// receiveImage, when set, runs before each ReceiveImage; its error
	// fails it.
	receiveImage func(image string) error
}

func (d *drainNode) ReceiveImage(ctx context.Context, image string, r io.Reader) error {
	d.mu.Lock()
	hook := d.receiveImage
	d.mu.Unlock()
	if hook != nil {
		if err := hook(image); err != nil {
			return err
		}
	}
	return d.Fake.ReceiveImage(ctx, image, r)
}

func (d *drainNode) OpenInVolume(string, string) (*os.File, fs.FileInfo, error) {
	return nil, nil, errors.ErrUnsupported
}

func (d *drainNode) OpenDirInVolume(string, string) (*os.Root, error) {
	return nil, errors.ErrUnsupported
}

// drainNodes is a Nodes of fake nodes: Place takes the ready ones in turn
// (or the pinned one), states are the test's.
type drainNodes struct {
	mu    sync.Mutex
	nodes map[string]*drainNode
	order []string
	state map[string]cluster.State
	next  int
	pin   string
}

func newDrainNodes(ids ...string) *drainNodes {
	dn := &drainNodes{nodes: map[string]*drainNode{}, state: map[string]cluster.State{}}
	for _, id := range ids {
		dn.nodes[id] = &drainNode{Fake: nodeapitest.NewFake(id)}
		dn.state[id] = cluster.Ready
		dn.order = append(dn.order, id)
	}
	return dn
}

func (dn *drainNodes) get(id string) *drainNode {
	dn.mu.Lock()
	defer dn.mu.Unlock()
	return dn.nodes[id]
}

func (dn *drainNodes) set(id string, st cluster.State) {
	dn.mu.Lock()
	dn.state[id] = st
	dn.mu.Unlock()
}

func (dn *drainNodes) Node(id string) (Node, error) {
	dn.mu.Lock()
	defer dn.mu.Unlock()
	n, ok := dn.nodes[id]
	if !ok || dn.state[id] == cluster.Unreachable || dn.state[id] == cluster.Lost {
		return nil, fmt.Errorf("node %q: %w", id, ErrNodeUnavailable)
	}
	return n, nil
}

func (dn *drainNodes) Place(req cluster.PlaceRequest) (string, error) {
	dn.mu.Lock()
	defer dn.mu.Unlock()
	if dn.pin != "" {
		return dn.pin, nil
	}
	for range dn.order {
		id := dn.order[dn.next%len(dn.order)]
		dn.next++
		if dn.state[id] == cluster.Ready {
			return id, nil
		}
	}
	return "", &cluster.CapacityError{Request: req, Nodes: len(dn.order)}
}

// Runtimes: the fake nodes run gVisor alone.
func (dn *drainNodes) Runtimes(string) (map[string]string, error) { return nil, nil }

func (dn *drainNodes) State(id string) cluster.State {
	dn.mu.Lock()
	defer dn.mu.Unlock()
	if st, ok := dn.state[id]; ok {
		return st
	}
	return cluster.Lost
}

func (dn *drainNodes) Joins(ctx context.Context) <-chan string {
	ch := make(chan string)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// drainStore is a store two control planes share, as replicas (or a
// control plane and its successor after a crash) do.
func drainStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func drainCP(t *testing.T, st store.Store, nodes Nodes) *ControlPlane {
	t.Helper()
	cp := New(Config{Store: st, Templates: fakeTemplates{}, Nodes: nodes})
	if err := cp.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cp
}

// dataOf is the data plane of sandbox s on its node.
func dataOf(t *testing.T, dn *drainNodes, s Sandbox) nodeapi.Sandbox {
	t.Helper()
	sb, err := dn.get(s.Node).Sandbox(context.Background(), s.ID)
	if err != nil {
		t.Fatalf("%s on %s: %v", s.ID, s.Node, err)
	}
	return sb
}

func writeFile(t *testing.T, dn *drainNodes, s Sandbox, path, content string) {
	t.Helper()
	if err := dataOf(t, dn, s).WriteFile(context.Background(), path, "", strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, dn *drainNodes, s Sandbox, path string) string {
	t.Helper()
	body, _, err := dataOf(t, dn, s).ReadFile(context.Background(), path, "")
	if err != nil {
		t.Fatalf("read %s of %s on %s: %v", path, s.ID, s.Node, err)
	}
	defer body.Close()
	b, _ := io.ReadAll(body)
	return string(b)
}

// onNode creates a running sandbox on node id with a file naming it.
func onNode(t *testing.T, cp *ControlPlane, dn *drainNodes, id string) Sandbox {
	t.Helper()
	dn.mu.Lock()
	dn.pin = id
	dn.mu.Unlock()
	defer func() {
		dn.mu.Lock()
		dn.pin = ""
		dn.mu.Unlock()
	}()
	req := createReq
	req.Metadata = map[string]string{"owner": "test"}
	s, err := cp.Create(project.Everything, req)
	if err != nil {
		t.Fatal(err)
	}
	s = waitRunning(t, cp, s.ID)
	writeFile(t, dn, s, "/home/user/who", "I am "+s.ID)
	return s
}

func get(t *testing.T, cp *ControlPlane, id string) Sandbox {
	t.Helper()
	s, err := cp.Get(project.Everything, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nothingOf fails unless node n holds nothing of sandbox id: no runtime,
// no root volume, no image of it, no snapshot volume.
func nothingOf(t *testing.T, n *drainNode, id string) {
	t.Helper()
	ctx := context.Background()
	if running, _ := n.Sandboxes(ctx); len(running) > 0 {
		for _, r := range running {
			if r == id {
				t.Fatalf("%s still runs on the node it left", id)
			}
		}
	}
	if ok, _ := n.VolumeExists(ctx, rootVolume(id)); ok {
		t.Fatalf("the root volume of %s is still on the node it left", id)
	}
	images, _ := n.Images(ctx)
	for _, img := range images {
		if strings.HasPrefix(img, id+"/") {
			t.Fatalf("image %s is still on the node it left", img)
		}
	}
	if vols, _ := n.Volumes(ctx, "snapshots/"+id); len(vols) > 0 {
		t.Fatalf("snapshot volumes %v are still on the node it left", vols)
	}
}

// The drain moves running, paused and suspended sandboxes with their
// files, snapshots and identity, and brings each back to its state.
func TestDrainMovesSandboxesWithTheirSnapshots(t *testing.T) {
	dn := newDrainNodes("n1", "n2", "n3")
	cp := drainCP(t, drainStore(t), dn)
	ctx := context.Background()
	running, paused, suspended := onNode(t, cp, dn, "n1"), onNode(t, cp, dn, "n1"), onNode(t, cp, dn, "n1")
	stays := onNode(t, cp, dn, "n2")
	if _, err := cp.CreateSnapshot(ctx, running.ID, "before"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dn, running, "/home/user/later", "after the snapshot")
	if _, err := cp.Pause(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Suspend(ctx, suspended.ID); err != nil {
		t.Fatal(err)
	}
	before := map[string]Sandbox{}
	for _, id := range []string{running.ID, paused.ID, suspended.ID} {
		before[id] = get(t, cp, id)
	}

	dn.set("n1", cluster.Draining)
	if err := cp.DrainNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{running.ID: apiv1.StateRunning, paused.ID: apiv1.StatePaused, suspended.ID: apiv1.StateSuspended}
	for id, state := range want {
		s, was := get(t, cp, id), before[id]
		if s.Node == "n1" || s.Node == "" {
			t.Fatalf("%s is still on %q", id, s.Node)
		}
		if s.State != state {
			t.Fatalf("%s is %s after the move, want %s (%s)", id, s.State, state, s.Reason)
		}
		if s.AccessToken != was.AccessToken || s.Metadata["owner"] != "test" || !s.ExpiresAt.Equal(was.ExpiresAt) {
			t.Fatalf("%s changed in the move: %+v, was %+v", id, s, was)
		}
		nothingOf(t, dn.get("n1"), id)
	}
	// Files arrived; a paused one resumes and a suspended one resumes on
	// its new node.
	s := get(t, cp, running.ID)
	if got := readFile(t, dn, s, "/home/user/who"); got != "I am "+running.ID {
		t.Fatalf("file after the move: %q", got)
	}
	if got := readFile(t, dn, s, "/home/user/later"); got != "after the snapshot" {
		t.Fatalf("file after the move: %q", got)
	}
	if paused, err := dn.get(get(t, cp, paused.ID).Node).Paused(ctx, paused.ID); err != nil || !paused {
		t.Fatalf("paused sandbox runs unpaused on its new node (%v)", err)
	}
	if _, err := cp.Resume(ctx, suspended.ID); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dn, get(t, cp, suspended.ID), "/home/user/who"); got != "I am "+suspended.ID {
		t.Fatalf("file of the suspended sandbox after the move: %q", got)
	}
	// The snapshot went along: it is on the sandbox's node, and a
	// restore of it works there.
	snap, err := cp.findSnapshot(running.ID, "before")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Node != s.Node {
		t.Fatalf("snapshot on %q, its sandbox on %q", snap.Node, s.Node)
	}
	if _, err := cp.Restore(ctx, project.Everything, running.ID, "before"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataOf(t, dn, get(t, cp, running.ID)).ReadFile(ctx, "/home/user/later", ""); err == nil {
		t.Fatal("the restore did not bring back the snapshot's files")
	}
	// Sandboxes of other nodes did not move.
	if got := get(t, cp, stays.ID); got.Node != "n2" || got.State != apiv1.StateRunning {
		t.Fatalf("sandbox of n2 is %s on %s", got.State, got.Node)
	}
	if images, _ := dn.get("n1").Images(ctx); len(images) != 0 {
		t.Fatalf("n1 still holds images %v", images)
	}
	if events, _ := cp.Events(running.ID); !hasEvent(events, "moved", "moved from node n1") {
		t.Fatalf("no move in the events: %+v", events)
	}
	if moves, _ := store.All[move](cp.cfg.Store, moveBucket); len(moves) != 0 {
		t.Fatalf("moves left recorded: %+v", moves)
	}
}

func hasEvent(events []Event, typ, text string) bool {
	for _, ev := range events {
		if ev.Type == typ && strings.Contains(ev.Message, text) {
			return true
		}
	}
	return false
}

// A transfer that fails leaves the sandbox on its node, running as it
// was, with nothing of it on the target; the drain goes on with the
// others and names the one it could not move.
func TestDrainFailureLeavesTheSandboxWhereItWas(t *testing.T) {
	dn := newDrainNodes("n1", "n2")
	cp := drainCP(t, drainStore(t), dn)
	ctx := context.Background()
	bad, good := onNode(t, cp, dn, "n1"), onNode(t, cp, dn, "n1")
	dn.get("n2").receiveImage = func(image string) error {
		if strings.HasPrefix(image, bad.ID+"/") {
			return errors.New("disk on fire")
		}
		return nil
	}
	dn.set("n1", cluster.Draining)
	err := cp.DrainNode(ctx, "n1")
	var derr *DrainError
	if !errors.As(err, &derr) || derr.Moved != 1 || derr.Failed[bad.ID] == nil || len(derr.Failed) != 1 {
		t.Fatalf("drain: %v; want %s failed and one moved", err, bad.ID)
	}
	if !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("the error does not say why: %v", err)
	}
	s := get(t, cp, bad.ID)
	if s.Node != "n1" || s.State != apiv1.StateRunning || s.Image != "" {
		t.Fatalf("failed sandbox is %s on %s (image %q), want running on n1", s.State, s.Node, s.Image)
	}
	if got := readFile(t, dn, s, "/home/user/who"); got != "I am "+bad.ID {
		t.Fatalf("file after the failed move: %q", got)
	}
	nothingOf(t, dn.get("n2"), bad.ID)
	if events, _ := cp.Events(bad.ID); !hasEvent(events, "drain", "disk on fire") {
		t.Fatalf("the failure is not in the sandbox's events: %+v", events)
	}
	if g := get(t, cp, good.ID); g.Node != "n2" || g.State != apiv1.StateRunning {
		t.Fatalf("the other sandbox is %s on %s", g.State, g.Node)
	}
	// With the target mended, a second drain moves it.
	dn.get("n2").receiveImage = nil
	if err := cp.DrainNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if s := get(t, cp, bad.ID); s.Node != "n2" || s.State != apiv1.StateRunning {
		t.Fatalf("second drain: %s on %s", s.State, s.Node)
	}
	nothingOf(t, dn.get("n1"), bad.ID)
}

// crashedMove runs a move of a running sandbox of n1 on cp as far as
// upTo says, and stops there, as a control plane that died would.
func crashedMove(t *testing.T, cp *ControlPlane, id string, upTo string) *move {
	t.Helper()
	ctx := context.Background()
	r, err := cp.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	r.lock.Lock()
	defer r.lock.Unlock()
	mv, release, err := cp.beginMove(ctx, r, "n1")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	switch upTo {
	case "volume":
		src, _ := cp.node(mv.From, "")
		dst, _ := cp.node(mv.To, "")
		if err := copyVolume(ctx, src, dst, nodeapi.ReceiveVolumeRequest{Name: rootVolume(id), Writable: true}); err != nil {
			t.Fatal(err)
		}
	case "copied", "switched":
		if err := cp.copyMove(ctx, mv); err != nil {
			t.Fatal(err)
		}
		if upTo == "switched" {
			if err := cp.switchMove(r, mv, mv.To); err != nil {
				t.Fatal(err)
			}
		}
	}
	return mv
}

// A control plane that takes over after a crash in the middle of a move
// finishes it when the sandbox is as the move left it, and rolls it back
// when the target is gone; either way the sandbox runs on one node and
// the other holds nothing of it.
func TestDrainInterruptedIsFinishedOrRolledBack(t *testing.T) {
	for _, tc := range []struct {
		upTo       string
		targetGone bool
		reconcile  string // the node whose reconcile settles it
		wantNode   string
	}{
		{upTo: "suspended", reconcile: "n1", wantNode: "n2"},
		{upTo: "volume", reconcile: "n1", wantNode: "n2"},
		{upTo: "copied", reconcile: "n1", wantNode: "n2"},
		{upTo: "copied", reconcile: "n2", wantNode: "n2"},
		{upTo: "switched", reconcile: "n2", wantNode: "n2"},
		{upTo: "copied", targetGone: true, reconcile: "n1", wantNode: "n1"},
	} {
		name := tc.upTo + "/reconcile-" + tc.reconcile
		if tc.targetGone {
			name += "/target-gone"
		}
		t.Run(name, func(t *testing.T) {
			dn := newDrainNodes("n1", "n2")
			st := drainStore(t)
			cp1 := drainCP(t, st, dn)
			s := onNode(t, cp1, dn, "n1")
			if _, err := cp1.CreateSnapshot(context.Background(), s.ID, "snap"); err != nil {
				t.Fatal(err)
			}
			dn.set("n1", cluster.Draining)
			mv := crashedMove(t, cp1, s.ID, tc.upTo)
			if mv.To != "n2" {
				t.Fatalf("moving to %s", mv.To)
			}
			if tc.targetGone {
				dn.set("n2", cluster.Unreachable)
			}
			// The successor loads the records and reconciles the node as
			// it joins.
			cp2 := drainCP(t, st, dn)
			if err := cp2.ReconcileNode(context.Background(), tc.reconcile); err != nil {
				t.Fatal(err)
			}
			got := get(t, cp2, s.ID)
			if got.Node != tc.wantNode || got.State != apiv1.StateRunning {
				t.Fatalf("after the takeover: %s on %s (%s), want running on %s", got.State, got.Node, got.Reason, tc.wantNode)
			}
			if !got.ExpiresAt.Equal(s.ExpiresAt) || got.AccessToken != s.AccessToken {
				t.Fatal("the move changed the sandbox's expiry or token")
			}
			if txt := readFile(t, dn, got, "/home/user/who"); txt != "I am "+s.ID {
				t.Fatalf("file after the takeover: %q", txt)
			}
			snap, err := cp2.findSnapshot(s.ID, "snap")
			if err != nil || snap.Node != tc.wantNode {
				t.Fatalf("snapshot on %q (%v), want %s", snap.Node, err, tc.wantNode)
			}
			if ok, _ := dn.get(tc.wantNode).VolumeExists(context.Background(), snap.Volume); !ok {
				t.Fatal("the snapshot's volume is not where its record says")
			}
			if tc.wantNode == "n2" {
				nothingOf(t, dn.get("n1"), s.ID)
			} else {
				dn.set("n2", cluster.Ready)
			}
			if moves, _ := store.All[move](st, moveBucket); len(moves) != 0 {
				t.Fatalf("moves left recorded: %+v", moves)
			}
		})
	}
}

// The sweep of a target that joins again while a move to it is under
// way keeps what the move copied there.
func TestReconcileOfTheTargetKeepsAMoveInProgress(t *testing.T) {
	dn := newDrainNodes("n1", "n2")
	cp := drainCP(t, drainStore(t), dn)
	s := onNode(t, cp, dn, "n1")
	if _, err := cp.CreateSnapshot(context.Background(), s.ID, "snap"); err != nil {
		t.Fatal(err)
	}
	dn.set("n1", cluster.Draining)
	ctx := context.Background()
	r, _ := cp.lookup(s.ID)
	r.lock.Lock()
	mv, release, err := cp.beginMove(ctx, r, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.copyMove(ctx, mv); err != nil {
		t.Fatal(err)
	}
	// n2 joins again: its reconcile runs while the move holds the lock.
	if err := cp.ReconcileNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	n2 := dn.get("n2")
	if info, _ := n2.Image(ctx, mv.Image); !info.Complete {
		t.Fatal("the reconcile of the target swept the moving sandbox's image")
	}
	if ok, _ := n2.VolumeExists(ctx, mv.Snapshots[0].Volume); !ok {
		t.Fatal("the reconcile of the target swept the moving snapshot's volume")
	}
	if info, _ := n2.Image(ctx, mv.Snapshots[0].Image); !info.Complete {
		t.Fatal("the reconcile of the target swept the moving snapshot's image")
	}
	if err := cp.advanceMove(ctx, r, mv); err != nil {
		t.Fatal(err)
	}
	release()
	r.lock.Unlock()
	if got := get(t, cp, s.ID); got.Node != "n2" || got.State != apiv1.StateRunning {
		t.Fatalf("%s on %s", got.State, got.Node)
	}
}

// Snapshots whose sandbox is gone move too; the Drainer runs one drain
// per node in the background and reports how it ended.
func TestDrainerMovesOrphanSnapshotsOnce(t *testing.T) {
	dn := newDrainNodes("n1", "n2")
	cp := drainCP(t, drainStore(t), dn)
	ctx := context.Background()
	s := onNode(t, cp, dn, "n1")
	snap, err := cp.CreateSnapshot(ctx, s.ID, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	dn.set("n1", cluster.Draining)
	var d Drainer
	if err := d.StartDrain("n1"); err == nil {
		t.Fatal("a drainer with no control plane started a drain")
	}
	var mu sync.Mutex
	var reports []error
	d.Start(ctx, cp, func(node string, err error) {
		mu.Lock()
		reports = append(reports, err)
		mu.Unlock()
	})
	for range 3 {
		if err := d.StartDrain("n1"); err != nil {
			t.Fatal(err)
		}
	}
	d.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || len(reports) > 3 || reports[0] != nil {
		t.Fatalf("reports %v", reports)
	}
	got, err := cp.findSnapshot(s.ID, "keep")
	if err != nil || got.Node != "n2" {
		t.Fatalf("snapshot on %q (%v)", got.Node, err)
	}
	if ok, _ := dn.get("n2").VolumeExists(ctx, snap.Volume); !ok {
		t.Fatal("the snapshot's volume did not arrive")
	}
	if info, _ := dn.get("n2").Image(ctx, snap.Image); !info.Complete {
		t.Fatal("the snapshot's image did not arrive")
	}
	nothingOf(t, dn.get("n1"), s.ID)
	if DrainReason(nil) == "" || !strings.Contains(DrainReason(&DrainError{Node: "n1", Moved: 2, Failed: map[string]error{"x": errors.New("no")}}), "1 could not") {
		t.Fatal("drain reasons")
	}
}
