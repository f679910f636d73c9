package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// clusterProc is one process of a cluster the test runs: `space
// control-plane` or `space node`, started from the built binary.
type clusterProc struct {
	t      *testing.T
	name   string
	args   []string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *clusterProc) start() {
	p.t.Helper()
	p.cmd = exec.Command(filepath.Join(env.binDir, "space"), p.args...)
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(p.cmd, p.exited)
}

// kill ends the process with SIGKILL: nothing of its own cleanup runs.
func (p *clusterProc) kill() {
	if p.cmd == nil || p.exited == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *clusterProc) showLog() {
	data, _ := os.ReadFile(p.log)
	p.t.Logf("%s log:\n%s", p.name, data)
}

// testCluster is PostgreSQL, control-plane replicas and nodes, each in a
// data directory of its own under /var/tmp.
type testCluster struct {
	t    *testing.T
	base string
	// cps are the control-plane replicas, cp the first; clients reach
	// each (with the one admin key), client the first.
	cps     []*clusterProc
	cp      *clusterProc
	nodes   []*clusterProc
	dirs    []string // the nodes' data dirs
	uplinks []string // the nodes' uplink pools
	clients []*client.Client
	client  *client.Client
	// urls are the replicas' API URLs, key the admin key.
	urls []string
	key  string
	// proxyURL is the first replica's sandbox proxy.
	proxyURL string
	// e2bURLs are the replicas' E2B APIs (clusterSpec.e2b).
	e2bURLs []string
}

// Uplink pools of the test's nodes: apart from each other and from
// serve's default (10.200.0.0/16), which the shared e2e server uses.
var clusterUplinks = []string{"10.201.0.0/20", "10.202.0.0/20"}

// clusterSpec shapes a test cluster.
type clusterSpec struct {
	replicas int
	// uplinks are the nodes' uplink pools, one node each.
	uplinks []string
	// heartbeatTimeout is the replicas' --heartbeat-timeout;
	// heartbeatInterval, when set, the nodes' --heartbeat-interval.
	heartbeatTimeout, heartbeatInterval time.Duration
	// e2b turns each replica's E2B API on (testCluster.e2bURLs).
	e2b bool
}

func startCluster(t *testing.T, nodes int) *testCluster {
	return startClusterWith(t, clusterSpec{replicas: 1, uplinks: clusterUplinks[:nodes], heartbeatTimeout: 6 * time.Second})
}

// startClusterWith starts PostgreSQL, spec's replicas and one node per
// uplink pool, and returns once every node joined holding minimal. Node i
// is given every replica's URL, starting with replica i mod replicas, so
// that each replica has nodes registered through it.
func startClusterWith(t *testing.T, spec clusterSpec) *testCluster {
	requireServer(t)
	testtier.Full(t, "starts a cluster of separate processes")
	pg := pgtest.Start(t)
	base, err := os.MkdirTemp("/var/tmp", "space-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, base: base, uplinks: spec.uplinks}
	t.Cleanup(c.stop)
	token := filepath.Join(base, "cluster.token")
	if err := os.WriteFile(token, []byte("e2e-cluster-token-"+strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := range spec.replicas {
		listen, proxyListen := freePort(t), freePort(t)
		if i == 0 {
			c.proxyURL = "http://" + proxyListen
		}
		urls = append(urls, "http://"+listen)
		name := fmt.Sprintf("cp%d", i+1)
		e2bListen := ""
		if spec.e2b {
			e2bListen = freePort(t)
			c.e2bURLs = append(c.e2bURLs, "http://"+e2bListen)
		}
		p := &clusterProc{t: t, name: "control plane " + name, log: filepath.Join(base, name+".log"), args: []string{
			"control-plane", "--store", pg, "--data-dir", filepath.Join(base, name), "--listen", listen,
			"--e2b-listen", e2bListen, "--proxy-listen", proxyListen, "--cluster-token-file", token,
			"--heartbeat-timeout", spec.heartbeatTimeout.String(),
		}}
		p.start()
		c.cps = append(c.cps, p)
		if i == 0 {
			// The first creates the admin key; the others read it from
			// the store's bootstrap.
			c.waitAdminKey(filepath.Join(base, name), urls[0])
		}
	}
	c.cp = c.cps[0]
	for i := 1; i < spec.replicas; i++ {
		c.waitAdminKey(filepath.Join(base, fmt.Sprintf("cp%d", i+1)), urls[i])
	}
	c.client = c.clients[0]
	for i, uplink := range spec.uplinks {
		dir := filepath.Join(base, fmt.Sprintf("node%d", i+1))
		order := append(slices.Clone(urls[i%len(urls):]), urls[:i%len(urls)]...)
		args := []string{
			"node", "--data-dir", dir, "--listen", freePort(t), "--control-plane", strings.Join(order, ","),
			"--cluster-token-file", token, "--uplink-pool", uplink, "--build-templates", "minimal",
			"--runsc", env.cfg.RunscPath, "--agent", env.cfg.AgentPath, "--volume-image-gib", "8",
			"--dns-upstream", env.cfg.DNSUpstream,
		}
		if spec.heartbeatInterval > 0 {
			args = append(args, "--heartbeat-interval", spec.heartbeatInterval.String())
		}
		if i == 0 {
			args = append(args, "--id", "node-one") // the others make theirs
		}
		p := &clusterProc{t: t, name: fmt.Sprintf("node %d", i+1), log: filepath.Join(base, fmt.Sprintf("node%d.log", i+1)), args: args}
		p.start()
		c.nodes, c.dirs = append(c.nodes, p), append(c.dirs, dir)
	}
	// Every node joined, holding minimal, and minimal is ready cluster-wide.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ns, err := c.client.ListNodes(context.Background())
		tpl, terr := c.client.GetTemplate(context.Background(), "minimal")
		if err == nil && terr == nil && tpl.State == apiv1.TemplateReady && len(ns) == len(spec.uplinks) && holdEverywhere(ns, tpl.ID) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not come up: nodes %+v (%v), template %+v (%v)", ns, err, tpl, terr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAdminKey waits for the replica of data dir dir to write admin.key,
// and adds a client of the replica at url with it.
func (c *testCluster) waitAdminKey(dir, url string) {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if key, err := os.ReadFile(filepath.Join(dir, "admin.key")); err == nil && len(bytes.TrimSpace(key)) > 0 {
			cl := client.New(url, strings.TrimSpace(string(key)))
			if _, err := cl.ListNodes(context.Background()); err == nil {
				c.clients, c.urls, c.key = append(c.clients, cl), append(c.urls, url), strings.TrimSpace(string(key))
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the control plane of %s did not come up with an admin.key", dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop kills every process, shows their logs if the test failed, and
// leaves no sandbox, mount, loop device or namespace of the nodes behind.
func (c *testCluster) stop() {
	for _, p := range append(slices.Clone(c.cps), c.nodes...) {
		if p == nil {
			continue
		}
		p.kill()
		if c.t.Failed() {
			p.showLog()
		}
	}
	for _, dir := range c.dirs {
		releaseDataDir(dir)
		// The nodes' namespace files are bind mounts of their own.
		storage.UnmountUnder(filepath.Join(dir, "netns"))
		_ = syscall.Unmount(filepath.Join(dir, "netns"), syscall.MNT_DETACH)
	}
	// A node adds its uplink pool to the host's masquerade set and leaves
	// it there (its sandboxes outlive it); the test's pools go.
	for _, pool := range c.uplinks {
		_ = exec.Command("nft", "delete element inet space uplink_pools { "+pool+" }").Run()
	}
	if os.Getenv("SPACE_TEST_KEEP") == "" {
		_ = os.RemoveAll(c.base)
	}
}

// nodeCounts are the sandboxes each node reports, by node id.
func (c *testCluster) nodeCounts(t *testing.T) map[string]int {
	ns, err := c.client.ListNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, n := range ns {
		out[n.ID] = n.Sandboxes
	}
	return out
}

// A control plane and two nodes as separate processes: sandboxes of
// minimal are created, exec'd and given files through the control plane,
// spread over both nodes, and reached through its proxy; a node killed
// with SIGKILL and started again keeps its sandboxes running, re-adopted
// with their memory state; a control plane killed and started again
// follows its nodes again.
func TestClusterProcesses(t *testing.T) {
	c := startCluster(t, 2)
	ctx := testContext(t)
	cl := c.client

	var sbs []*apiv1.Sandbox
	for i := range 4 {
		sb, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Metadata: map[string]string{"i": strconv.Itoa(i)}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if sb, err = cl.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
		sbs = append(sbs, sb)
	}
	perNode := map[string][]string{}
	for i, sb := range sbs {
		if sb.Node == "" || sb.NodeState != "ready" {
			t.Fatalf("sandbox %s: node %q, node_state %q", sb.ID, sb.Node, sb.NodeState)
		}
		perNode[sb.Node] = append(perNode[sb.Node], sb.ID)
		res, err := cl.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo hello from $SPACE_SANDBOX_ID"}})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hello from "+sb.ID {
			t.Fatalf("exec in %s: %+v, %v", sb.ID, res, err)
		}
		body := fmt.Sprintf("file %d of %s", i, sb.ID)
		if _, err := cl.WriteFile(ctx, sb.ID, "/tmp/f.txt", strings.NewReader(body)); err != nil {
			t.Fatalf("write file in %s: %v", sb.ID, err)
		}
		r, err := cl.ReadFile(ctx, sb.ID, "/tmp/f.txt")
		if err != nil {
			t.Fatalf("read file in %s: %v", sb.ID, err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != body {
			t.Fatalf("file in %s: %q, want %q", sb.ID, got, body)
		}
	}
	if len(perNode) != 2 {
		t.Fatalf("4 sandboxes on %d node(s) (%v), want both nodes used", len(perNode), perNode)
	}
	// The control plane's proxy reaches a port of a sandbox on each node.
	for _, ids := range perNode {
		id := ids[0]
		execOn(t, cl, id, `mkdir -p /tmp/www && echo served by $SPACE_SANDBOX_ID > /tmp/www/index.html && busybox httpd -p 8080 -h /tmp/www`)
		deadline := time.Now().Add(20 * time.Second)
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.proxyURL+"/index.html", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("E2b-Sandbox-Id", id)
			req.Header.Set("E2b-Sandbox-Port", "8080")
			resp := do(t, req)
			if resp.status == http.StatusOK && string(resp.body) == "served by "+id+"\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the proxy never reached port 8080 of %s: %d %q", id, resp.status, resp.body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The nodes count them too (their heartbeats may lag a little).
	deadline := time.Now().Add(30 * time.Second)
	for {
		counts := c.nodeCounts(t)
		ok := true
		for id, ids := range perNode {
			ok = ok && counts[id] == len(ids)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes report %v sandboxes, want %v", counts, perNode)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A counter in the first node's sandbox: its value only grows while
	// the same process runs.
	victim := c.nodes[0]
	victimID := "node-one"
	if len(perNode[victimID]) == 0 {
		t.Fatalf("node-one runs none of %v", perNode)
	}
	target := perNode[victimID][0]
	if _, err := cl.CreateSession(ctx, target, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done"}}); err != nil {
		t.Fatal(err)
	}
	readCount := func() int {
		t.Helper()
		res, err := cl.Exec(ctx, target, apiv1.ExecRequest{Cmd: []string{"cat", "/tmp/count"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("read the counter: %+v, %v", res, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if err != nil {
			t.Fatalf("counter %q: %v", res.Stdout, err)
		}
		return n
	}
	time.Sleep(time.Second)
	before := readCount()
	if before < 3 {
		t.Fatalf("counter at %d after a second", before)
	}

	victim.kill()
	// While the node is down its sandboxes do not answer; the other
	// node's do.
	if res, err := cl.Exec(ctx, target, apiv1.ExecRequest{Cmd: []string{"true"}}); err == nil {
		t.Fatalf("exec on node-one while it is down answered %+v", res)
	} else {
		t.Logf("exec while the node is down: %v", err)
	}
	other := perNode[otherNode(perNode, victimID)][0]
	if _, err := cl.Exec(ctx, other, apiv1.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatalf("exec on the other node while node-one is down: %v", err)
	}
	victim.start()
	deadline = time.Now().Add(time.Minute)
	var after int
	for {
		res, err := cl.Exec(ctx, target, apiv1.ExecRequest{Cmd: []string{"cat", "/tmp/count"}})
		if err == nil && res.ExitCode == 0 {
			after, _ = strconv.Atoi(strings.TrimSpace(res.Stdout))
			if after > before {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s after node-one restarted: %+v, %v", target, res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sb, err := cl.GetSandbox(ctx, target)
	if err != nil || sb.State != apiv1.StateRunning || sb.Node != victimID || sb.NodeState != "ready" {
		t.Fatalf("sandbox after re-adoption: %+v, %v", sb, err)
	}
	// A restarted process would count from 1 again: the counter went on.
	if after <= before {
		t.Fatalf("counter %d after the restart, %d before", after, before)
	}

	// A control plane killed and started again over its store finds its
	// nodes by their heartbeats and follows them again: a sandbox whose
	// runtime dies on the other node is seen to end.
	c.cp.kill()
	c.cp.start()
	deadline = time.Now().Add(time.Minute)
	for {
		if _, err := cl.ListNodes(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the control plane did not come back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	execOn(t, cl, target, "true")
	doomed := perNode[otherNode(perNode, victimID)]
	dies := doomed[len(doomed)-1]
	execOn(t, cl, dies, "true")
	// After a heartbeat, which joins the node to the new process.
	time.Sleep(6 * time.Second)
	loseRuntime(dies)
	deadline = time.Now().Add(30 * time.Second)
	for {
		sb, err := cl.GetSandbox(ctx, dies)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != apiv1.StateRunning {
			t.Logf("sandbox %s whose runtime died: %s (%s)", dies, sb.State, sb.Reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still running 30 s after its runtime died: the restarted control plane does not follow its node", dies)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, sb := range sbs {
		if err := cl.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	}
	// The nodes run nothing any more.
	c.waitNodesEmpty(t)
}

// runtimesUnder lists the command lines of the sandbox processes of the
// node whose data dir is dir.
func runtimesUnder(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(filepath.Join(dir, "runtime")+"/")) {
			out = append(out, string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// execOn runs a shell command through cl and fails unless it exits 0.
func execOn(t *testing.T, cl *client.Client, id, script string) {
	t.Helper()
	res, err := cl.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %+v, %v", script, id, res, err)
	}
}

func otherNode(perNode map[string][]string, not string) string {
	for id := range perNode {
		if id != not {
			return id
		}
	}
	return ""
}

// dialRPC dials the cluster service of the first control plane as a node
// would, with the cluster's token; closed when the test ends.
func (c *testCluster) dialRPC(t *testing.T) *clusterrpc.Client {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(c.base, "cluster.token"))
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := clusterrpc.Dial(c.client.BaseURL(), strings.TrimSpace(string(token)), clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rpc.Close() })
	return rpc
}

// clusterNodesTrustWeb starts each node again with the fake web's CA
// (--egress-ca-file), as the e2e server was started, so that its gateway
// verifies the fake web's servers. Each node keeps its templates: the
// egress CA it fetches from the control plane again is the same, so no
// template is rebuilt and minimal keeps one id on every node, which is
// checked.
func clusterNodesTrustWeb(t *testing.T, c *testCluster) {
	t.Helper()
	webCA := filepath.Join(c.base, "web-ca.pem")
	if err := os.WriteFile(webCA, env.web.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.nodes {
		p.kill()
		p.args = append(p.args, "--egress-ca-file", webCA)
		p.start()
	}
	tpl, err := c.client.GetTemplate(testContext(t), "minimal")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range c.nodes {
		for {
			data, _ := os.ReadFile(p.log)
			if bytes.Count(data, []byte(" listening on ")) >= 2 {
				if bytes.Contains(data, []byte("rebuilding template")) {
					t.Fatalf("%s rebuilt a template after its restart: the CA it fetched again differs", p.name)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come back", p.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		ns, err := c.client.ListNodes(testContext(t))
		if err == nil && len(ns) == len(c.nodes) && holdEverywhere(ns, tpl.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes do not all hold minimal %s after their restart: %+v (%v)", tpl.ID, ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Nodes keep the CA in memory only.
	for _, dir := range c.dirs {
		if _, err := os.Stat(filepath.Join(dir, "ca")); !os.IsNotExist(err) {
			t.Errorf("node data dir %s has a CA directory (%v)", dir, err)
		}
	}
}
