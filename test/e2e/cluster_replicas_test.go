package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// Uplink pools of TestClusterReplicas' nodes: apart from
// TestClusterProcesses' and the bench script's (10.211-215), which may run
// on the machine at the same time.
var replicaUplinks = []string{"10.221.0.0/20", "10.222.0.0/20", "10.223.0.0/20"}

// The heartbeat bound of TestClusterReplicas' control planes, and the
// nodes' heartbeat interval: short, to keep node loss quick to see.
const (
	replicaHeartbeatTimeout  = 5 * time.Second
	replicaHeartbeatInterval = time.Second
)

// Two control-plane replicas and three nodes as separate processes on one
// PostgreSQL (issue 11's tests with real processes):
//   - spread: 30 sandboxes land on all three nodes; exec, sessions and
//     files work through both replicas; an attach cut on one replica and
//     resumed by offset on the other loses no byte;
//   - node-loss: a node killed with SIGKILL makes its sandboxes
//     unreachable within the bound, operations on them answer 503, the
//     other nodes' sandboxes go on; restarted, it is adopted again with
//     its sandboxes' memory;
//   - drain: a node's running and suspended sandboxes move to the others
//     with their memory and files;
//   - replica-kill: a replica killed with SIGKILL during a burst of
//     creates: every create it answered 202 runs, through the other; the
//     nodes stay joined through it; a sandbox's timeout fires once.
func TestClusterReplicas(t *testing.T) {
	began := time.Now()
	c := startClusterWith(t, clusterSpec{
		replicas: 2, uplinks: replicaUplinks,
		heartbeatTimeout: replicaHeartbeatTimeout, heartbeatInterval: replicaHeartbeatInterval,
	})
	t.Logf("cluster of 2 replicas and 3 nodes up in %s", time.Since(began).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ns, err := c.client.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var nodeIDs []string
	for _, n := range ns {
		nodeIDs = append(nodeIDs, n.ID)
	}
	slices.Sort(nodeIDs)

	perNode := map[string][]string{} // the sandboxes kept after spread, by node
	if !t.Run("spread", func(t *testing.T) { perNode = clusterSpread(ctx, t, c, nodeIDs) }) {
		return
	}
	if !t.Run("node-loss", func(t *testing.T) { clusterNodeLoss(ctx, t, c, perNode) }) {
		return
	}
	if !t.Run("drain", func(t *testing.T) { clusterDrain(ctx, t, c, perNode) }) {
		return
	}
	if !t.Run("replica-kill", func(t *testing.T) { clusterReplicaKill(ctx, t, c) }) {
		return
	}
	// What is left goes, through the replica that lives, while the nodes
	// run: nothing of the sandboxes (netns, rules, cgroups) stays behind.
	cl := c.clients[1]
	all, err := cl.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	history := map[string]string{} // for a sandbox that outlives its delete
	for _, sb := range all {
		events, _ := cl.Events(ctx, sb.ID)
		history[sb.ID] = fmt.Sprintf("%s on %s: %+v", sb.State, sb.Node, events)
		if err := cl.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	}
	for id, h := range history {
		for _, dir := range c.dirs {
			for _, p := range runtimesUnder(dir) {
				if strings.Contains(p, id) {
					t.Logf("sandbox %s still runs after its delete; before it: %s", id, h)
				}
			}
		}
	}
	c.waitNodesEmpty(t)
}

// clusterSpread creates 30 sandboxes through both replicas in turn, checks
// that each node got some (by the sandboxes' node and the nodes' counts),
// works with each through both replicas, and resumes an attach on the
// other replica. It deletes all but two sandboxes per node, which it
// returns by node.
func clusterSpread(ctx context.Context, t *testing.T, c *testCluster, nodeIDs []string) map[string][]string {
	const n = 30
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.clients[i%2].CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Metadata: map[string]string{"i": strconv.Itoa(i)}})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	perNode := map[string][]string{}
	for i, id := range ids {
		sb, err := c.clients[(i+1)%2].WaitSandbox(ctx, id, apiv1.StateRunning, 3*time.Minute)
		if err != nil {
			t.Fatalf("wait for %s: %v", id, err)
		}
		if sb.NodeState != "ready" || !slices.Contains(nodeIDs, sb.Node) {
			t.Fatalf("sandbox %s: node %q (%q), want one of %v, ready", id, sb.Node, sb.NodeState, nodeIDs)
		}
		perNode[sb.Node] = append(perNode[sb.Node], id)
	}
	for _, node := range nodeIDs {
		if len(perNode[node]) == 0 {
			t.Fatalf("30 sandboxes and node %s runs none: %v", node, perNode)
		}
	}
	t.Logf("30 sandboxes by node: %v", counts(perNode))
	// Both replicas' GET /v1/nodes count them (heartbeats lag a little).
	for _, cl := range c.clients {
		waitNodeCounts(ctx, t, cl, perNode)
	}

	for i, id := range ids {
		a, b := c.clients[i%2], c.clients[(i+1)%2]
		res, err := a.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo hello from $SPACE_SANDBOX_ID"}})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hello from "+id {
			t.Fatalf("exec in %s: %+v, %v", id, res, err)
		}
		body := fmt.Sprintf("file %d of %s", i, id)
		if _, err := b.WriteFile(ctx, id, "/tmp/f.txt", strings.NewReader(body)); err != nil {
			t.Fatalf("write file in %s: %v", id, err)
		}
		if got := readFile(ctx, t, a, id, "/tmp/f.txt"); got != body {
			t.Fatalf("file in %s through the other replica: %q, want %q", id, got, body)
		}
		sess, err := b.CreateSession(ctx, id, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", "echo session of $SPACE_SANDBOX_ID"}})
		if err != nil {
			t.Fatalf("session in %s: %v", id, err)
		}
		if out, _ := attachAll(ctx, t, a, id, sess.ID, 0, -1); out != "session of "+id+"\n" {
			t.Fatalf("session output of %s through the other replica: %q", id, out)
		}
	}

	// An attach started on one replica, cut, and resumed by offset on the
	// other: every byte once.
	id := ids[0]
	const lines = 2000
	sess, err := c.clients[0].CreateSession(ctx, id, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); if [ $((i %% 250)) = 0 ]; then sleep 0.2; fi; done`, lines)},
	})
	if err != nil {
		t.Fatal(err)
	}
	first, offset := attachAll(ctx, t, c.clients[0], id, sess.ID, 0, 3)
	if offset == 0 {
		t.Fatal("the first attach read nothing")
	}
	rest, _ := attachAll(ctx, t, c.clients[1], id, sess.ID, offset, -1)
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := first + rest; got != want.String() {
		t.Fatalf("output read across the replicas (%d bytes, cut at %d) differs from what the session wrote (%d bytes)", len(got), offset, want.Len())
	}
	t.Logf("attach cut at byte %d on one replica, resumed on the other: %d bytes, none lost", offset, want.Len())

	// Two sandboxes per node stay for the next steps.
	kept := map[string][]string{}
	for node, sbs := range perNode {
		kept[node] = sbs[:2]
		for i, id := range sbs[2:] {
			if err := c.clients[i%2].DeleteSandbox(ctx, id); err != nil {
				t.Fatalf("delete %s: %v", id, err)
			}
		}
	}
	return kept
}

// clusterNodeLoss kills a node with SIGKILL: its sandboxes turn
// unreachable within the bound, answer 503 with a JSON code and message,
// the others go on; restarted, its sandboxes are adopted again with their
// memory state.
func clusterNodeLoss(ctx context.Context, t *testing.T, c *testCluster, perNode map[string][]string) {
	victim, victimID := c.nodes[0], "node-one"
	target := perNode[victimID][0]
	startTokenCounter(ctx, t, c.clients[0], target)
	tok, before := readTokenCounter(ctx, t, c.clients[1], target)

	victim.kill()
	killed := time.Now()
	// At once, before the bound: the node does not answer, which is a 503
	// too, naming the node and not its address.
	expect503(ctx, t, c, target)
	for _, id := range perNode[victimID] {
		for {
			sb, err := c.clients[1].GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.NodeState == "unreachable" {
				if sb.State != apiv1.StateRunning || sb.Node != victimID {
					t.Fatalf("sandbox %s on the lost node: %s on %s; want it kept as it was", id, sb.State, sb.Node)
				}
				break
			}
			if time.Since(killed) > replicaHeartbeatTimeout+replicaHeartbeatInterval+5*time.Second {
				t.Fatalf("sandbox %s still %q %s after its node was killed", id, sb.NodeState, time.Since(killed))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("the killed node's sandboxes unreachable %s after the kill (bound %s)", time.Since(killed).Round(100*time.Millisecond), replicaHeartbeatTimeout)
	expect503(ctx, t, c, target)
	// The other nodes' sandboxes are not affected, through either replica.
	for node, ids := range perNode {
		if node == victimID {
			continue
		}
		for i, id := range ids {
			execOn(t, c.clients[i%2], id, "true")
			if sb, err := c.clients[i%2].GetSandbox(ctx, id); err != nil || sb.NodeState != "ready" {
				t.Fatalf("sandbox %s on %s while another node is down: %+v, %v", id, node, sb, err)
			}
		}
	}

	victim.start()
	restarted := time.Now()
	for {
		sb, err := c.clients[0].GetSandbox(ctx, target)
		if err == nil && sb.NodeState == "ready" {
			if _, err := c.clients[0].Exec(ctx, target, apiv1.ExecRequest{Cmd: []string{"true"}}); err == nil {
				break
			}
		}
		if time.Since(restarted) > 2*time.Minute {
			t.Fatalf("sandbox %s after its node restarted: %+v, %v", target, sb, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	tokAfter, after := readTokenCounter(ctx, t, c.clients[1], target)
	if tokAfter != tok || after <= before {
		t.Fatalf("counter %s %d after the node's restart, %s %d before: its process did not live on", tokAfter, after, tok, before)
	}
	for _, id := range perNode[victimID] {
		sb, err := c.clients[1].GetSandbox(ctx, id)
		if err != nil || sb.State != apiv1.StateRunning || sb.Node != victimID || sb.NodeState != "ready" {
			t.Fatalf("sandbox %s after re-adoption: %+v, %v", id, sb, err)
		}
	}
	t.Logf("node back and its sandboxes adopted %s after its restart", time.Since(restarted).Round(100*time.Millisecond))
}

// clusterDrain drains a node running one sandbox and holding a suspended
// one: both move to other nodes, the running one running with its counter
// process, the suspended one suspended, and resumed elsewhere with its
// counter and files.
func clusterDrain(ctx context.Context, t *testing.T, c *testCluster, perNode map[string][]string) {
	var drained string
	for node := range perNode {
		if node != "node-one" {
			drained = node
			break
		}
	}
	running, suspended := perNode[drained][0], perNode[drained][1]
	state := map[string]string{}
	for i, id := range []string{running, suspended} {
		cl := c.clients[i%2]
		startTokenCounter(ctx, t, cl, id)
		body := "kept across the drain by " + id
		if _, err := cl.WriteFile(ctx, id, "/home/user/kept.txt", strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		state[id] = body
	}
	tokR, beforeR := readTokenCounter(ctx, t, c.clients[0], running)
	tokS, beforeS := readTokenCounter(ctx, t, c.clients[1], suspended)
	if _, err := c.clients[1].Suspend(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	if _, err := c.clients[0].WaitSandbox(ctx, suspended, apiv1.StateSuspended, time.Minute); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if _, err := c.clients[0].DrainNode(ctx, drained); err != nil {
		t.Fatalf("drain %s: %v", drained, err)
	}
	want := map[string]string{running: apiv1.StateRunning, suspended: apiv1.StateSuspended}
	moved := map[string]string{}
	for id, st := range want {
		for {
			sb, err := c.clients[1].GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.Node != drained && sb.State == st && sb.NodeState == "ready" {
				moved[id] = sb.Node
				break
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("sandbox %s %s on %s 3 minutes into the drain of %s", id, sb.State, sb.Node, drained)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("drain of %s moved %v in %s", drained, moved, time.Since(start).Round(100*time.Millisecond))
	// The node is left with nothing.
	for {
		if counts := c.nodeCounts(t); counts[drained] == 0 {
			break
		}
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("the drained node still counts sandboxes: %v", c.nodeCounts(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.clients[1].Resume(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	if _, err := c.clients[1].WaitSandbox(ctx, suspended, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for id, tb := range map[string]struct {
		tok    string
		before int
	}{running: {tokR, beforeR}, suspended: {tokS, beforeS}} {
		tok, n := readTokenCounter(ctx, t, c.clients[0], id)
		if tok != tb.tok || n <= tb.before {
			t.Fatalf("counter of %s after the drain: %s %d, before %s %d: its process did not move with it", id, tok, n, tb.tok, tb.before)
		}
		if got := readFile(ctx, t, c.clients[1], id, "/home/user/kept.txt"); got != state[id] {
			t.Fatalf("file of %s after the drain: %q, want %q", id, got, state[id])
		}
	}
	// Back in service for the next step.
	if _, err := c.clients[0].UncordonNode(ctx, drained); err != nil {
		t.Logf("uncordon %s after its drain: %v", drained, err)
	}
}

// clusterReplicaKill kills the first replica (which leads: it started
// first) with SIGKILL during a burst of creates through it: every create
// it answered 202 reaches running through the second; the nodes that
// heartbeat through it stay joined; a sandbox timeout due after the kill
// fires once.
func clusterReplicaKill(ctx context.Context, t *testing.T, c *testCluster) {
	a, b := c.clients[0], c.clients[1]
	// Due after the kill, once the other replica leads.
	timed, err := a.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", TimeoutS: 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitSandbox(ctx, timed.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	const burst = 12
	var (
		mu       sync.Mutex
		answered []string
		refused  int
		wg       sync.WaitGroup
	)
	killAt := make(chan struct{})
	var once sync.Once
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread over a second or so, so that the kill falls inside.
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			sb, err := a.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Metadata: map[string]string{"burst": strconv.Itoa(i)}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused++
				return
			}
			answered = append(answered, sb.ID)
			if len(answered) == 4 {
				once.Do(func() { close(killAt) })
			}
		}()
	}
	<-killAt
	c.cps[0].kill()
	killed := time.Now()
	wg.Wait()
	t.Logf("replica 1 killed with SIGKILL during a burst of %d creates: %d answered 202, %d not answered", burst, len(answered), refused)
	if len(answered) < 4 {
		t.Fatalf("only %d creates answered", len(answered))
	}
	for _, id := range answered {
		sb, err := b.WaitSandbox(ctx, id, apiv1.StateRunning, 3*time.Minute)
		if err != nil {
			t.Fatalf("sandbox %s answered 202 by the killed replica: %v", id, err)
		}
		execOn(t, b, id, "true")
		if sb.NodeState != "ready" {
			t.Fatalf("sandbox %s: node_state %q", id, sb.NodeState)
		}
	}
	t.Logf("every answered create running through replica 2 %s after the kill", time.Since(killed).Round(100*time.Millisecond))

	// The nodes that heartbeat through the dead replica fail over: after
	// more than the bound, all are ready.
	time.Sleep(replicaHeartbeatTimeout + 2*replicaHeartbeatInterval)
	ns, err := b.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.State != "ready" {
			t.Fatalf("node %s is %s (%s) after the replica it registered with died", n.ID, n.State, n.Reason)
		}
	}

	// The timeout fires once, under the surviving replica's lease.
	sb, err := b.WaitSandbox(ctx, timed.ID, apiv1.StateStopped, 2*time.Minute)
	if err != nil {
		t.Fatalf("sandbox %s with a 20 s timeout: %v", timed.ID, err)
	}
	if sb.Reason != "timeout" {
		t.Fatalf("sandbox %s stopped for %q, want timeout", timed.ID, sb.Reason)
	}
	time.Sleep(3 * time.Second) // a second firing would show by now
	events, err := b.Events(ctx, timed.ID)
	if err != nil {
		t.Fatal(err)
	}
	stops := 0
	for _, ev := range events {
		if ev.Type == "state" && ev.To == apiv1.StateStopping {
			stops++
		}
	}
	if stops != 1 {
		t.Fatalf("the timeout stopped sandbox %s %d times, want once: %+v", timed.ID, stops, events)
	}
}

// expect503 checks that an exec on id answers 503 with a JSON code and a
// message naming no address, through each replica.
func expect503(ctx context.Context, t *testing.T, c *testCluster, id string) {
	t.Helper()
	for _, url := range c.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"cmd":["true"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Code    int
			Message string
		}
		if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != http.StatusServiceUnavailable || e.Message == "" {
			t.Fatalf("exec on a sandbox of a dead node through %s: %d %s; want 503 with a JSON code and message", url, resp.StatusCode, body)
		}
		if strings.Contains(e.Message, "127.0.0.1") || strings.Contains(e.Message, "http") || strings.Contains(e.Message, "/var/") {
			t.Fatalf("503 message names an address or path: %q", e.Message)
		}
	}
}

// startTokenCounter starts a counter session in id: a random token made once
// and a count, written to /tmp/count ten times a second. The same token
// with a larger count later proves the same process went on.
func startTokenCounter(ctx context.Context, t *testing.T, cl *client.Client, id string) {
	t.Helper()
	if _, err := cl.CreateSession(ctx, id, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c",
		`tok=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); i=0; while :; do i=$((i+1)); echo "$tok $i" > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done`}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := cl.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"cat", "/tmp/count"}})
		if err == nil && res.ExitCode == 0 {
			if f := strings.Fields(res.Stdout); len(f) == 2 && f[1] != "1" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter in %s did not start: %+v, %v", id, res, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readTokenCounter reads the counter startTokenCounter runs in id.
func readTokenCounter(ctx context.Context, t *testing.T, cl *client.Client, id string) (string, int) {
	t.Helper()
	res, err := cl.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"cat", "/tmp/count"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("read the counter of %s: %+v, %v", id, res, err)
	}
	f := strings.Fields(res.Stdout)
	if len(f) != 2 {
		t.Fatalf("counter of %s: %q", id, res.Stdout)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("counter of %s: %q", id, res.Stdout)
	}
	return f[0], n
}

// attachAll reads session sid's output from offset through cl, up to
// events output events (-1: to its exit), and returns what it read and
// the offset after it.
func attachAll(ctx context.Context, t *testing.T, cl *client.Client, id, sid string, from int64, events int) (string, int64) {
	t.Helper()
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cl.Attach(actx, id, sid, from)
	if err != nil {
		t.Fatalf("attach %s/%s: %v", id, sid, err)
	}
	defer stream.Close()
	var out strings.Builder
	offset := from
	for n := 0; events < 0 || n < events; n++ {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("attach %s/%s: %v", id, sid, err)
		}
		switch ev.Type {
		case apiv1.EventTruncated:
			t.Fatalf("attach %s/%s: output dropped: %+v", id, sid, ev.Truncated)
		case apiv1.EventExit:
			if ev.ExitCode != 0 {
				t.Fatalf("session %s/%s exited %d", id, sid, ev.ExitCode)
			}
			return out.String(), offset
		}
		out.Write(ev.Data)
		offset = ev.Offset
	}
	return out.String(), offset
}

func readFile(ctx context.Context, t *testing.T, cl *client.Client, id, path string) string {
	t.Helper()
	r, err := cl.ReadFile(ctx, id, path)
	if err != nil {
		t.Fatalf("read %s in %s: %v", path, id, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s in %s: %v", path, id, err)
	}
	return string(data)
}

// waitNodeCounts waits until cl's GET /v1/nodes counts perNode's
// sandboxes on each node.
func waitNodeCounts(ctx context.Context, t *testing.T, cl *client.Client, perNode map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ns, err := cl.ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		got := map[string]int{}
		for _, n := range ns {
			got[n.ID] = n.Sandboxes
			ok = ok && n.Sandboxes == len(perNode[n.ID])
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/nodes counts %v, want %v", got, counts(perNode))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func counts(perNode map[string][]string) map[string]int {
	out := map[string]int{}
	for k, v := range perNode {
		out[k] = len(v)
	}
	return out
}

// waitNodesEmpty waits until no node runs a sandbox process any more.
func (c *testCluster) waitNodesEmpty(t *testing.T) {
	t.Helper()
	for i, dir := range c.dirs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if len(runtimesUnder(dir)) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d still runs sandboxes after every delete: %v", i+1, runtimesUnder(dir))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
