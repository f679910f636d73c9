package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/agent/envdversion"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// upgradedAgent builds a second agent whose bytes differ from the one the
// server runs (its Build string is linked in), as an upgrade of space
// brings a new agent.
func upgradedAgent(t *testing.T, build string) string {
	t.Helper()
	out := filepath.Join(env.binDir, "space-agent-"+build)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command("go", "build", "-o", out,
		"-ldflags", "-X github.com/space-platform/space/internal/agent/envdversion.Build="+build, "./cmd/space-agent")
	cmd.Dir = env.repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the upgraded agent: %v\n%s", err, b)
	}
	return out
}

// agentBuild asks a sandbox's agent, through the proxy, which build it is.
func agentBuild(t *testing.T, sb *apiv1.Sandbox) string {
	t.Helper()
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.ID)
	h.Set("E2b-Sandbox-Port", "49983")
	h.Set("X-Access-Token", sb.AccessToken)
	resp := proxyRequest(t, http.MethodGet, "/health", "", nil, h)
	if resp.status != http.StatusNoContent {
		t.Fatalf("agent health of %s: %d %s", sb.ID, resp.status, resp.body)
	}
	return resp.header.Get(envdversion.BuildHeader)
}

// storedAgents lists the digests in the node's agent store.
func storedAgents(t *testing.T, dataDir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "node", "agents"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && len(e.Name()) == 64 {
			out[e.Name()] = true
		}
	}
	return out
}

// An operator upgrades space (a new agent binary) and restarts it: every
// sandbox suspended before comes back with its memory, a snapshot taken
// before restores in place and into a new sandbox, a branch suspended
// before resumes, a sandbox that ran through the restart suspends and
// resumes again; each keeps the agent its memory holds while new sandboxes
// get the new one. Once nothing uses the new agent any more (the operator
// went back), its binary is removed.
func TestUpgradedAgentRestoresEveryImage(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	upgraded := upgradedAgent(t, "upgraded")
	before := storedAgents(t, env.dataDir)

	type counted struct {
		sb     *apiv1.Sandbox
		pid    uint32
		before int
	}
	prepare := func(name string) counted {
		sb := newSandbox(t, apiv1.CreateSandboxRequest{MemoryMB: 256})
		pid := startCounter(t, sb.ID)
		if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/kept.txt", strings.NewReader(name)); err != nil {
			t.Fatal(err)
		}
		return counted{sb: sb, pid: pid, before: count(t, sb.ID)}
	}
	suspended := prepare("suspended")
	snapped := prepare("snapped")
	through := prepare("through") // runs through the restart
	source := prepare("source")

	snapped.before = count(t, snapped.sb.ID) // the snapshot holds at least this
	if _, err := env.client.CreateSnapshot(ctx, snapped.sb.ID, "before-upgrade"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.WriteFile(ctx, snapped.sb.ID, "/home/user/after.txt", strings.NewReader("after the snapshot")); err != nil {
		t.Fatal(err)
	}
	branches, err := env.client.Branch(ctx, source.sb.ID, 1)
	if err != nil || len(branches) != 1 {
		t.Fatalf("branch: %v, %v", branches, err)
	}
	branch := counted{sb: &branches[0], pid: source.pid, before: source.before}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), branch.sb.ID) })
	if _, err := env.client.WaitSandbox(ctx, branch.sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, c := range []counted{suspended, branch} {
		if _, err := env.client.Suspend(ctx, c.sb.ID); err != nil {
			t.Fatalf("suspend %s: %v", c.sb.ID, err)
		}
	}
	oldBuild := agentBuild(t, through.sb)

	original := env.cfg.AgentPath
	env.cfg.AgentPath = upgraded
	restartServer(t)
	t.Cleanup(func() {
		// Whatever failed, the tests after this one run the original.
		if env.cfg.AgentPath != original {
			env.cfg.AgentPath = original
			restartServer(t)
		}
	})

	fresh := newSandbox(t, apiv1.CreateSandboxRequest{})
	if got := agentBuild(t, fresh); got != "upgraded" {
		t.Fatalf("a new sandbox runs agent build %q, want the upgraded one", got)
	}
	execOK(t, fresh.ID, "true")

	check := func(what string, c counted, wantFile string) {
		t.Helper()
		got, err := env.client.GetSandbox(ctx, c.sb.ID)
		if err != nil || got.State != apiv1.StateRunning {
			t.Fatalf("%s after the upgrade: %+v, %v", what, got, err)
		}
		execOK(t, c.sb.ID, "true")
		requireCounting(t, c.sb.ID, c.before, c.pid)
		if b := readAll(t, c.sb.ID, "/home/user/kept.txt"); string(b) != wantFile {
			t.Fatalf("%s: file holds %q, want %q", what, b, wantFile)
		}
		if b := agentBuild(t, got); b != oldBuild {
			t.Fatalf("%s runs agent build %q, want the one its memory holds (%q)", what, b, oldBuild)
		}
	}
	for _, c := range []struct {
		what string
		c    counted
		file string
	}{{"suspended sandbox", suspended, "suspended"}, {"suspended branch", branch, "source"}} {
		if _, err := env.client.Resume(ctx, c.c.sb.ID); err != nil {
			t.Fatalf("resume the %s after the upgrade: %v", c.what, err)
		}
		check(c.what, c.c, c.file)
	}

	// A sandbox that ran through the restart runs the old agent still;
	// suspended now, its image holds that agent, and so does its resume.
	check("sandbox running through the restart", through, "through")
	if _, err := env.client.Suspend(ctx, through.sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(ctx, through.sb.ID); err != nil {
		t.Fatalf("resume after the upgrade of a sandbox adopted across it: %v", err)
	}
	check("sandbox suspended after the upgrade", through, "through")

	// The snapshot from before: into a new sandbox, and in place.
	copied, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: snapped.sb.ID + "/before-upgrade"})
	if err != nil {
		t.Fatalf("new sandbox from a snapshot taken before the upgrade: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), copied.ID) })
	if _, err := env.client.WaitSandbox(ctx, copied.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	check("new sandbox from an older snapshot", counted{sb: copied, pid: snapped.pid, before: snapped.before}, "snapped")
	if _, err := env.client.Restore(ctx, snapped.sb.ID, "before-upgrade"); err != nil {
		t.Fatalf("restore in place of a snapshot taken before the upgrade: %v", err)
	}
	check("sandbox restored in place", counted{sb: snapped.sb, pid: snapped.pid, before: snapped.before}, "snapped")
	if out := execOK(t, snapped.sb.ID, "cat /home/user/after.txt 2>/dev/null || echo none"); strings.TrimSpace(out) != "none" {
		t.Fatalf("restored in place, the file written after the snapshot is still there: %q", out)
	}

	stored := storedAgents(t, env.dataDir)
	var upgradedDigest string
	for d := range stored {
		if !before[d] {
			upgradedDigest = d
		}
	}
	if upgradedDigest == "" || len(stored) < 2 {
		t.Fatalf("agent store after the upgrade: %v (before %v)", stored, before)
	}

	// Back to the original agent: the upgraded one stays while a sandbox
	// runs it, and goes with the last one.
	env.cfg.AgentPath = original
	restartServer(t)
	if !storedAgents(t, env.dataDir)[upgradedDigest] {
		t.Fatal("the upgraded agent was removed while a sandbox runs it")
	}
	if got := agentBuild(t, fresh); got != "upgraded" {
		t.Fatalf("after going back, the sandbox made under the upgrade runs %q", got)
	}
	if err := env.client.DeleteSandbox(ctx, fresh.ID); err != nil && !client.IsNotFound(err) {
		t.Fatal(err)
	}
	if storedAgents(t, env.dataDir)[upgradedDigest] {
		t.Fatal("the upgraded agent's binary outlived the last sandbox that ran it")
	}
}

// countOn reads the counter of a sandbox of a separate server.
func countOn(t *testing.T, c *client.Client, id string) int {
	t.Helper()
	res, err := c.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "cat /home/user/count 2>/dev/null || echo 0"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("read the counter of %s: %+v, %v", id, res, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("counter of %s holds %q", id, res.Stdout)
	}
	return n
}

// requireCountingOn is requireCounting on a separate server.
func requireCountingOn(t *testing.T, c *client.Client, id string, before int) {
	t.Helper()
	after := countOn(t, c, id)
	if after < before {
		t.Fatalf("%s: counter went back from %d to %d: the process lost its memory", id, before, after)
	}
	deadline := time.Now().Add(10 * time.Second)
	for countOn(t, c, id) <= after {
		if time.Now().After(deadline) {
			t.Fatalf("%s: counter stuck at %d", id, after)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startCountingOn starts a sandbox running the counter on a separate
// server and returns its id and a count it reached.
func startCountingOn(t *testing.T, c *client.Client) (string, int) {
	t.Helper()
	ctx := testContext(t)
	sb, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", counterScript}}); err != nil {
		t.Fatal(err)
	}
	for countOn(t, c, sb.ID) < 3 {
		time.Sleep(20 * time.Millisecond)
	}
	return sb.ID, countOn(t, c, sb.ID)
}

// The server is killed and started again with an upgraded agent: the
// sandbox that ran through the crash is adopted with its old agent (and
// suspends and resumes with it), the one suspended before resumes with
// its memory, and new sandboxes run the new agent.
func TestCrashThenUpgradedAgentKeepsEverySandbox(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)
	upgraded := upgradedAgent(t, "upgraded")
	running, runningBefore := startCountingOn(t, s.client)
	suspended, suspendedBefore := startCountingOn(t, s.client)
	if _, err := s.client.Suspend(ctx, suspended); err != nil {
		t.Fatal(err)
	}

	s.kill()
	s.agent = upgraded
	s.start()

	if _, err := s.client.WaitSandbox(ctx, running, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatalf("sandbox running through the crash: %v", err)
	}
	requireCountingOn(t, s.client, running, runningBefore)
	before := countOn(t, s.client, running)
	if _, err := s.client.Suspend(ctx, running); err != nil {
		t.Fatalf("suspend, after the upgrade, a sandbox adopted with its old agent: %v", err)
	}
	if _, err := s.client.Resume(ctx, running); err != nil {
		t.Fatalf("resume it: %v", err)
	}
	requireCountingOn(t, s.client, running, before)

	if _, err := s.client.Resume(ctx, suspended); err != nil {
		t.Fatalf("resume, after the crash and the upgrade, a sandbox suspended before: %v", err)
	}
	requireCountingOn(t, s.client, suspended, suspendedBefore)

	fresh, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, fresh.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	execOK2(t, s.client, fresh.ID)
	if n := len(storedAgents(t, s.dataDir)); n != 2 {
		t.Fatalf("agent store holds %d agents, want the old one (running sandboxes use it) and the new one", n)
	}
	for _, id := range []string{running, suspended, fresh.ID} {
		if err := s.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(storedAgents(t, s.dataDir)); n != 1 {
		t.Fatalf("agent store holds %d agents once nothing runs the old one, want the current one only", n)
	}
}

// A sandbox suspended on a node of the old release moves, over the node
// RPC, to a node already upgraded: the image brings its agent along, the
// receiving node stores it by digest and resumes the sandbox with it.
func TestSuspendedSandboxMovesToAnUpgradedNode(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	upgraded := upgradedAgent(t, "upgraded")
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	rec, err := env.client.Suspend(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	a := overRPC(t, env.srv.Node())
	bNode, bDir := secondNodeWithAgent(t, "node-up", upgraded)
	b := overRPC(t, bNode)
	if err := moveSuspended(t, ctx, a, bNode, b, rec); err != nil {
		t.Fatalf("resume on the upgraded node: %v", err)
	}
	data, err := b.Sandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	read := func() int {
		res, err := data.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"cat", "/home/user/count"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec on the upgraded node: %+v, %v", res, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		if err != nil {
			t.Fatalf("counter holds %q", res.Stdout)
		}
		return n
	}
	first := read()
	if first < before {
		t.Fatalf("counter went back from %d to %d", before, first)
	}
	deadline := time.Now().Add(10 * time.Second)
	for read() <= first {
		if time.Now().After(deadline) {
			t.Fatalf("counter (pid %d) stuck at %d on the upgraded node", pid, first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var agents []string
	for d := range storedAgents(t, bDir) {
		agents = append(agents, d)
	}
	if len(agents) != 2 {
		t.Fatalf("the upgraded node stores agents %v, want its own and the one the image brought", agents)
	}
}

// A data dir from before the agent store (one agent in node/agent, images
// that record none) upgraded: the old agent is adopted as the one those
// images hold, the suspended sandbox resumes with it, and its image now
// names it.
func TestImagesFromBeforeAgentDigestsResumeAfterAnUpgrade(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)
	upgraded := upgradedAgent(t, "upgraded")
	id, before := startCountingOn(t, s.client)
	if _, err := s.client.Suspend(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.kill()
	// The layout of the release before: the agent in node/agent, no
	// store, images without their agent.
	node := filepath.Join(s.dataDir, "node")
	if err := os.RemoveAll(filepath.Join(node, "agents")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(node, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(env.cfg.AgentPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(node, "agent", "space-agent"), old, 0o755); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(s.dataDir, "images", id, "suspend")
	for _, f := range []string{"agent-digest", "space-agent"} {
		if err := os.Remove(filepath.Join(image, f)); err != nil {
			t.Fatal(err)
		}
	}

	s.agent = upgraded
	s.start()
	if _, err := s.client.Resume(ctx, id); err != nil {
		t.Fatalf("resume, after the upgrade, an image that records no agent: %v", err)
	}
	requireCountingOn(t, s.client, id, before)
	legacy, err := os.ReadFile(filepath.Join(node, "agents", "legacy"))
	if err != nil || !storedAgents(t, s.dataDir)[string(legacy)] {
		t.Fatalf("the old agent was not adopted: %q, %v", legacy, err)
	}
	if _, err := s.client.Suspend(ctx, id); err != nil {
		t.Fatal(err)
	}
	if named, err := os.ReadFile(filepath.Join(image, "agent-digest")); err != nil || string(named) != string(legacy) {
		t.Fatalf("suspended again, its image names agent %q (%v), want the adopted one %q", named, err, legacy)
	}
	if err := s.client.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
}
