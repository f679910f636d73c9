package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// realNodes is a control plane's Nodes over real nodes of this process:
// creates go to the pinned one, the rest to the ready ones in turn.
type realNodes struct {
	mu    sync.Mutex
	nodes map[string]*node.Node
	order []string
	state map[string]cluster.State
	pin   string
	next  int
}

func (rn *realNodes) Node(id string) (controlplane.Node, error) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	n, ok := rn.nodes[id]
	if !ok {
		return nil, fmt.Errorf("node %s: %w", id, controlplane.ErrNodeUnavailable)
	}
	return n, nil
}

func (rn *realNodes) Place(req cluster.PlaceRequest) (string, error) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.pin != "" {
		return rn.pin, nil
	}
	for range rn.order {
		id := rn.order[rn.next%len(rn.order)]
		rn.next++
		if rn.state[id] == cluster.Ready {
			return id, nil
		}
	}
	return "", &cluster.CapacityError{Request: req, Nodes: len(rn.order)}
}

func (rn *realNodes) Runtimes(id string) (map[string]string, error) {
	n, err := rn.Node(id)
	if err != nil {
		return nil, err
	}
	info, err := n.Info(context.Background())
	return info.Runtimes, err
}

func (rn *realNodes) State(id string) cluster.State {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.state[id]
}

func (rn *realNodes) Joins(ctx context.Context) <-chan string {
	ch := make(chan string)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

// oneTemplate is a catalog of the one template the server built.
type oneTemplate struct{ spec nodeapi.TemplateSpec }

func (o oneTemplate) Resolve(_ project.Scope, name string) (nodeapi.TemplateSpec, string, error) {
	if name != "minimal" && name != o.spec.ID {
		return nodeapi.TemplateSpec{}, "", fmt.Errorf("template %s: %w", name, controlplane.ErrUnknownTemplate)
	}
	return o.spec, "minimal", nil
}

// A drain of a real node moves its running and suspended sandboxes to
// another real node: the running one runs there with its memory (its
// counter counts on, its session's journal whole), the suspended one
// stays suspended and resumes there with its files; nothing is left on
// the drained node.
func TestDrainMovesSandboxesBetweenRealNodes(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	tpl, err := env.srv.TemplateSpec("minimal")
	if err != nil {
		t.Fatal(err)
	}
	rn := &realNodes{nodes: map[string]*node.Node{}, state: map[string]cluster.State{}}
	for _, id := range []string{"node-b", "node-c"} {
		n := secondNode(t, id)
		// The template's root volume goes to the nodes, as templates do.
		relay(t, "template volume",
			func(w io.Writer) error { return env.srv.Node().SendVolume(ctx, tpl.RootfsVolume, w) },
			func(r io.Reader) error {
				return n.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: tpl.RootfsVolume}, r)
			})
		rn.nodes[id], rn.state[id] = n, cluster.Ready
		rn.order = append(rn.order, id)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp := controlplane.New(controlplane.Config{
		Store: st, Templates: oneTemplate{tpl}, Nodes: rn, Defaults: env.cfg.Defaults,
	})
	if err := cp.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	rn.pin = "node-b"
	var ids []string
	for range 2 {
		s, err := cp.Create(project.Everything, apiv1.CreateSandboxRequest{Template: "minimal", Metadata: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if s, err = cp.Wait(ctx, s.ID, apiv1.StateRunning); err != nil {
			t.Fatalf("start on node-b: %v", err)
		}
		ids = append(ids, s.ID)
		t.Cleanup(func() { _ = cp.Delete(context.Background(), s.ID) })
	}
	rn.pin = ""
	running, suspended := ids[0], ids[1]
	dataOn := func(nodeID, id string) nodeapi.Sandbox {
		t.Helper()
		sb, err := rn.nodes[nodeID].Sandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	run := func(sb nodeapi.Sandbox, script string) string {
		t.Helper()
		res, err := sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"/bin/sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %v %+v", script, err, res)
		}
		return string(res.Stdout)
	}
	for _, id := range ids {
		run(dataOn("node-b", id), "echo I am "+id+" > /tmp/who")
	}
	sess, err := dataOn("node-b", running).StartSession(ctx, nodeapi.SessionSpec{
		Cmd: []string{"/bin/sh", "-c", `i=0; while true; do echo "n $i"; i=$((i+1)); sleep 0.05; done`},
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	before := journalOf(t, ctx, rn.nodes["node-b"], running, sess.ID)
	if _, err := cp.Suspend(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	token := map[string]string{}
	for _, id := range ids {
		s, _ := cp.Get(project.Everything, id)
		token[id] = s.AccessToken
	}

	rn.mu.Lock()
	rn.state["node-b"] = cluster.Draining
	rn.mu.Unlock()
	if err := cp.DrainNode(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{running: apiv1.StateRunning, suspended: apiv1.StateSuspended} {
		s, err := cp.Get(project.Everything, id)
		if err != nil || s.Node != "node-c" || s.State != want || s.AccessToken != token[id] || s.Metadata["k"] != "v" {
			t.Fatalf("%s after the drain: %s on %s (%s), %v", id, s.State, s.Node, s.Reason, err)
		}
	}
	// The running one runs on node-c from its memory: same session, the
	// counter going on from where it stood, every line once.
	moved := dataOn("node-c", running)
	if got := run(moved, "cat /tmp/who"); got != "I am "+running+"\n" {
		t.Fatalf("file on node-c: %q", got)
	}
	want := fmt.Sprintf("n %d\n", lastCount(before)+20)
	deadline := time.Now().Add(time.Minute)
	var out string
	for !strings.Contains(out, want) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		out = journalOf(t, ctx, rn.nodes["node-c"], running, sess.ID)
	}
	if !strings.HasPrefix(out, before) || !strings.Contains(out, want) {
		t.Fatalf("session on node-c: %q...; want it to start with what was printed before and reach %q", tail(out), want)
	}
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line != fmt.Sprintf("n %d", i) {
			t.Fatalf("line %d is %q: the counter did not go on from where it was", i, line)
		}
	}
	// The suspended one resumes on node-c with its files.
	if _, err := cp.Resume(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	if got := run(dataOn("node-c", suspended), "cat /tmp/who"); got != "I am "+suspended+"\n" {
		t.Fatalf("file of the suspended sandbox on node-c: %q", got)
	}
	// Nothing is left on node-b.
	b := rn.nodes["node-b"]
	if left, _ := b.Sandboxes(ctx); len(left) != 0 {
		t.Fatalf("node-b still runs %v", left)
	}
	for _, id := range ids {
		if ok, _ := b.VolumeExists(ctx, "sandboxes/"+id); ok {
			t.Fatalf("node-b still holds the root volume of %s", id)
		}
	}
	if images, _ := b.Images(ctx); len(images) != 0 {
		t.Fatalf("node-b still holds images %v", images)
	}
}
