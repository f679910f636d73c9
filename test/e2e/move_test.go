package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/noderpc"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/gvisor"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/pkg/apiv1"
)

// secondNode is another real node in this process, a machine of its own:
// its own data directory, btrfs pool, runtime state and namespace
// directory, and no egress (its sandboxes have no way out).
func secondNode(t *testing.T, id string) *node.Node {
	t.Helper()
	nd, _ := secondNodeWithAgent(t, id, env.cfg.AgentPath)
	return nd
}

// secondNodeWithAgent is secondNode running another agent binary (a node
// already upgraded); it also returns the node's data directory.
func secondNodeWithAgent(t *testing.T, id, agent string) (*node.Node, string) {
	t.Helper()
	dir, err := filepathTemp(t, id)
	if err != nil {
		t.Fatal(err)
	}
	slots, err := network.OpenNamespaces(filepath.Join(dir, "netns"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gvisor.New(gvisor.Config{RunscPath: env.cfg.RunscPath, StateDir: filepath.Join(dir, "runtime"), Platform: env.cfg.Platform, Namespaces: slots})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := storage.Open(context.Background(), storage.Options{
		Root: filepath.Join(dir, "volumes"), ImagePath: filepath.Join(dir, "volumes.img"), ImageSizeBytes: 4 << 30, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseDataDir(dir) })
	nd, err := node.New(node.Config{
		Namespaces: slots, Runtimes: map[string]runtime.Runtime{runtime.GVisor: rt}, Volumes: pool, AgentBinary: agent,
		StateDir: filepath.Join(dir, "node"), ImagesDir: filepath.Join(dir, "images"), ID: id,
	})
	if err != nil {
		t.Fatal(err)
	}
	return nd, dir
}

// filepathTemp is a test directory on the disk the server's data is on
// (a loop image in /tmp may be on a small tmpfs).
func filepathTemp(t *testing.T, id string) (string, error) {
	dir := filepath.Join(env.dataDir, id+"-"+strconv.Itoa(int(time.Now().UnixNano()%1e9)))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir, os.MkdirAll(dir, 0o755)
}

// overRPC serves n over the node RPC on loopback and returns a client, as
// the control plane of a cluster reaches its nodes.
func overRPC(t *testing.T, n nodeapi.Node) *noderpc.Client {
	t.Helper()
	const token = "e2e-move-token"
	srv, err := noderpc.NewServer(noderpc.NewHandler(n, token, nil), noderpc.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = noderpc.Serve(srv, ln) }()
	t.Cleanup(func() { srv.Close() })
	c, err := noderpc.Dial("http://"+ln.Addr().String(), token, noderpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// relay streams send into receive through this process, as a drain does.
func relay(t *testing.T, what string, send func(io.Writer) error, receive func(io.Reader) error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := send(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	rerr := receive(pr)
	pr.CloseWithError(errors.New("received"))
	serr := <-done
	if rerr != nil {
		t.Fatalf("%s: receive: %v (send: %v)", what, rerr, serr)
	}
}

// A sandbox suspended on one node and moved to another, volume and
// memory image over the node RPC, goes on there: its counter counts on
// from where it was, its session's journal holds what it printed before
// the move (attach from 0 reads it), and its files are there.
func TestSuspendedSandboxMovesToAnotherNode(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	execOK(t, sb.ID, "echo moved-with-me > /tmp/marker")
	sess, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", `i=0; while true; do echo "n $i"; i=$((i+1)); sleep 0.05; done`},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A session that ended before the move: its process is gone, so only
	// the journal knows what it printed.
	done, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", "echo printed before the move; exit 3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := collect(t, sb.ID, done.ID); code != 3 || out != "printed before the move\n" {
		t.Fatalf("ended session: %q, exit %d", out, code)
	}
	waitForOutput(t, sb.ID, sess.ID, "n 20\n")
	rec, err := env.client.Suspend(ctx, sb.ID)
	if err != nil || rec.State != apiv1.StateSuspended {
		t.Fatalf("suspend: %+v, %v", rec, err)
	}
	// What the session printed before the move, from node A's journal.
	a := overRPC(t, env.srv.Node())
	before := journalOf(t, ctx, a, sb.ID, sess.ID)
	if !strings.HasPrefix(before, "n 0\nn 1\n") || !strings.Contains(before, "n 20\n") {
		t.Fatalf("output before the move: %q", before)
	}

	bNode := secondNode(t, "node-b")
	b := overRPC(t, bNode)
	if err := moveSuspended(t, ctx, a, bNode, b, rec); err != nil {
		t.Fatal(err)
	}

	data, err := b.Sandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := data.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"cat", "/tmp/marker"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "moved-with-me" {
		t.Fatalf("file on the new node: %v %+v", err, res)
	}
	// The same session, its journal as it was, and the counter going on
	// from where it stood: attach from 0 reads everything, in order.
	info, err := data.Session(ctx, sess.ID)
	if err != nil {
		t.Fatalf("session on the new node: %v", err)
	}
	if info.OutputBytes < int64(len(before)) || info.DroppedBytes != 0 {
		t.Fatalf("journal on the new node: %+v, printed %d bytes before", info, len(before))
	}
	ended, err := data.Session(ctx, done.ID)
	if err != nil || ended.End == nil || ended.End.ExitCode != 3 {
		t.Fatalf("ended session on the new node: %+v, %v", ended, err)
	}
	if out := journalOf(t, ctx, b, sb.ID, done.ID); out != "printed before the move\n" {
		t.Fatalf("ended session's journal on the new node: %q", out)
	}
	last := lastCount(before)
	wantLine := fmt.Sprintf("n %d\n", last+20)
	attachCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got strings.Builder
	_, err = data.Attach(attachCtx, sess.ID, 0, func(req, first int64) error {
		return fmt.Errorf("output %d..%d was dropped", req, first)
	}, func(c nodeapi.Chunk) error {
		if int64(got.Len()) != c.Offset {
			return fmt.Errorf("chunk at %d after %d bytes", c.Offset, got.Len())
		}
		got.Write(c.Data)
		if strings.Contains(got.String(), wantLine) {
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("attach on the new node: %v; read %q", err, tail(got.String()))
	}
	if !strings.HasPrefix(got.String(), before) {
		t.Fatal("the journal on the new node does not start with what was printed before the move")
	}
	// Counting on, not again: every number once, in order.
	for i, line := range strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n") {
		if line != fmt.Sprintf("n %d", i) {
			t.Fatalf("line %d is %q: the counter did not go on from where it was", i, line)
		}
	}
}

// moveSuspended moves a suspended sandbox's root volume and suspend image
// from node a to node b (bNode, over b) as a drain does, and resumes it
// there; the test's end removes it from b.
func moveSuspended(t *testing.T, ctx context.Context, a nodeapi.Node, bNode *node.Node, b nodeapi.Node, rec *apiv1.Sandbox) error {
	t.Helper()
	image := rec.ID + "/suspend" // as the control plane names it
	vol := "sandboxes/" + rec.ID
	relay(t, "root volume",
		func(w io.Writer) error { return a.SendVolume(ctx, vol, w) },
		func(r io.Reader) error {
			return b.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: vol, Writable: true, DiskMB: rec.DiskMB}, r)
		})
	relay(t, "memory image",
		func(w io.Writer) error { return a.SendImage(ctx, image, w) },
		func(r io.Reader) error { return b.ReceiveImage(ctx, image, r) })
	t.Cleanup(func() {
		_ = bNode.Destroy(context.Background(), rec.ID)
		_ = bNode.DeleteImage(context.Background(), image)
	})
	d := env.cfg.Defaults
	return b.ResumeFrom(ctx, nodeapi.RestoreSpec{
		ID: rec.ID, Image: image, DiskMB: rec.DiskMB, AccessToken: rec.AccessToken,
		Limits: runtime.Limits{VCPUs: rec.VCPUs, MemoryMB: rec.MemoryMB, Pids: d.Pids},
	})
}

var errFound = errors.New("found")

// journalOf reads what a session's journal holds on node n.
func journalOf(t *testing.T, ctx context.Context, n nodeapi.Node, id, sid string) string {
	t.Helper()
	data, err := n.Sandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	info, err := data.Session(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = data.Attach(actx, sid, 0, func(int64, int64) error { return errors.New("dropped") }, func(c nodeapi.Chunk) error {
		out.Write(c.Data)
		if int64(out.Len()) >= info.OutputBytes {
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("read the journal of %s: %v", sid, err)
	}
	return out.String()
}

// lastCount is the last number the counter printed in out.
func lastCount(out string) int {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	n, _ := strconv.Atoi(strings.TrimPrefix(lines[len(lines)-1], "n "))
	return n
}

func tail(s string) string {
	if len(s) > 200 {
		return "..." + s[len(s)-200:]
	}
	return s
}
