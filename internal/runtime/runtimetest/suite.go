// Package runtimetest is the conformance suite of sandbox runtime
// backends: Run drives any runtime.Runtime (gVisor's, a microVM's) through
// the same cases on real sandboxes, so the node can rely on one behaviour
// whichever backend runs a sandbox. The cases reach the agent only through
// DialAgent and look inside only with busybox commands, so they assume
// nothing of how a backend isolates.
package runtimetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

// Harness is one case's backend and what the cases need to run sandboxes
// on it. Everything it makes is removed when the case ends.
type Harness struct {
	// New returns a backend object on the case's state. Every call makes
	// a new object on the same state, as a restarted server does; it must
	// adopt the sandboxes an earlier object started.
	New func(t *testing.T) runtime.Runtime
	// Rootfs makes a writable root filesystem of a kind the backend takes,
	// holding the minimal template's tree (template.WriteMinimalRootfs).
	Rootfs func(t *testing.T) runtime.Rootfs
	// CopyRootfs copies a root filesystem whose sandbox is frozen or
	// stopped, as a snapshot does: what a restore of a checkpoint taken on
	// it runs on.
	CopyRootfs func(t *testing.T, from runtime.Rootfs) runtime.Rootfs
	// Slot makes the network slot of a new sandbox id.
	Slot func(t *testing.T, id string) *network.Slot
	// Agent is the agent binary on the host.
	Agent string
	// Limits are those sandboxes run under when a case sets none.
	Limits runtime.Limits
	// MinVCPUs is the fewest CPUs a sandbox is shown, whatever its limit
	// (gVisor shows at least 2); zero means the limit is shown as is.
	MinVCPUs int
	// GuestOOM says the sandbox has a kernel of its own, whose OOM killer
	// ends the process that exceeds the memory instead of the sandbox (a
	// VM); otherwise the host must end the sandbox and Wait say so. The
	// OOM case's sandbox has OOMMemoryMB and allocates 256 MiB.
	GuestOOM bool
	// OOMMemoryMB is the OOM case's memory limit, below 256; zero means
	// 64. A VM needs more to boot at all: its own kernel and initramfs
	// live in it.
	OOMMemoryMB int
	// Timeout bounds each case; zero means two minutes.
	Timeout time.Duration
}

// Run runs every case as a subtest; setup is called once per case.
func Run(t *testing.T, setup func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, c *suiteCase)
	}{
		{"StartExec", testStartExec},
		{"PauseResume", testPauseResume},
		{"CheckpointRestoreSideBySide", testCheckpointRestore},
		{"SuspendRestoreInPlace", testSuspendRestore},
		{"Destroy", testDestroy},
		{"ExitWhenKilled", testExitWhenKilled},
		{"ExitOnOOM", testExitOnOOM},
		{"Adoption", testAdoption},
		{"Limits", testLimits},
		{"Isolation", testIsolation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			d := h.Timeout
			if d == 0 {
				d = 2 * time.Minute
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			t.Cleanup(cancel)
			tc.fn(t, &suiteCase{h: h, ctx: ctx, rt: h.New(t)})
		})
	}
}

// suiteCase is one case's harness, context and first backend object.
type suiteCase struct {
	h   Harness
	ctx context.Context
	rt  runtime.Runtime
}

// box is one sandbox a case started or restored.
type box struct {
	id     string
	rootfs runtime.Rootfs
	slot   *network.Slot
	limits runtime.Limits
	token  string
}

const envPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (c *suiteCase) spec(b *box) runtime.Spec {
	return runtime.Spec{
		ID: b.id, Rootfs: b.rootfs, Network: b.slot, Agent: c.h.Agent,
		Env:      []string{envPath, "SPACE_AGENT_TOKEN=" + b.token},
		Hostname: b.id, Limits: b.limits,
	}
}

// newBox makes a new sandbox's id, network slot and (unless given) root
// filesystem, and destroys the sandbox when the case ends, before its slot
// and root filesystem go.
func (c *suiteCase) newBox(t *testing.T, rootfs *runtime.Rootfs, limits *runtime.Limits) *box {
	t.Helper()
	b := &box{id: sandboxid.New(), limits: c.h.Limits, token: "tok-" + sandboxid.New()}
	if limits != nil {
		b.limits = *limits
	}
	if rootfs != nil {
		b.rootfs = *rootfs
	} else {
		b.rootfs = c.h.Rootfs(t)
	}
	b.slot = c.h.Slot(t, b.id)
	t.Logf("sandbox %s", b.id)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.rt.Destroy(ctx, b.id); err != nil {
			t.Errorf("destroy %s: %v", b.id, err)
		}
	})
	return b
}

// start boots a new sandbox and waits for its agent.
func (c *suiteCase) start(t *testing.T, limits *runtime.Limits) *box {
	t.Helper()
	b := c.newBox(t, nil, limits)
	if err := c.rt.Start(c.ctx, c.spec(b)); err != nil {
		t.Fatalf("start %s: %v", b.id, err)
	}
	c.agent(b).waitHealthy(t, c.ctx)
	return b
}

// restore starts b from the image and waits for its agent.
func (c *suiteCase) restore(t *testing.T, b *box, image string) {
	t.Helper()
	begin := time.Now()
	if err := c.rt.Restore(c.ctx, c.spec(b), image); err != nil {
		t.Fatalf("restore %s: %v", b.id, err)
	}
	c.agent(b).waitHealthy(t, c.ctx)
	t.Logf("restored %s in %s", b.id, time.Since(begin).Round(time.Millisecond))
}

func (c *suiteCase) agent(b *box) *agentClient { return newAgentClient(c.rt, b.id, b.token) }

// status is the sandbox's status, "" for a sandbox the backend does not know.
func (c *suiteCase) status(t *testing.T, rt runtime.Runtime, id string) runtime.Status {
	t.Helper()
	st, err := rt.State(c.ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	return st.Status
}

func (c *suiteCase) requireStatus(t *testing.T, rt runtime.Runtime, id string, want runtime.Status) {
	t.Helper()
	if got := c.status(t, rt, id); got != want {
		t.Fatalf("%s is %q, want %q", id, got, want)
	}
}

// requireEnded waits a little for the backend to see that the sandbox is
// neither running nor paused: a host process just ended may not be reaped
// yet.
func (c *suiteCase) requireEnded(t *testing.T, rt runtime.Runtime, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := c.status(t, rt, id)
		if st != runtime.StatusRunning && st != runtime.StatusPaused {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still %q", id, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counter counts in a shell variable (process memory), mirroring it to a
// file by rename, so a case can tell a process that kept its memory from
// one that lost it or stopped.
const counter = `(i=0; while true; do i=$((i+1)); echo $i > /tmp/.count; mv /tmp/.count /tmp/count; sleep 0.05; done) >/dev/null 2>&1 &`

func (c *suiteCase) startCounter(t *testing.T, b *box) int {
	t.Helper()
	c.agent(b).run(t, c.ctx, counter)
	for {
		if n := c.count(t, b); n >= 3 {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *suiteCase) count(t *testing.T, b *box) int {
	t.Helper()
	out := strings.TrimSpace(c.agent(b).run(t, c.ctx, "cat /tmp/count 2>/dev/null || echo 0"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter of %s holds %q", b.id, out)
	}
	return n
}

// requireCounting checks that b's counter goes on from at least before.
func (c *suiteCase) requireCounting(t *testing.T, b *box, before int) {
	t.Helper()
	now := c.count(t, b)
	if now < before {
		t.Fatalf("counter of %s went back from %d to %d: the process lost its memory", b.id, before, now)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.count(t, b) <= now {
		if time.Now().After(deadline) {
			t.Fatalf("counter of %s stuck at %d", b.id, now)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testStartExec: a started sandbox runs the agent, which runs commands as
// the sandbox's hostname; the backend lists it and reads its usage.
func testStartExec(t *testing.T, c *suiteCase) {
	b := c.start(t, nil)
	if out := c.agent(b).run(t, c.ctx, "echo hello from $(hostname)"); strings.TrimSpace(out) != "hello from "+b.id {
		t.Fatalf("exec said %q", out)
	}
	if code, _, err := c.agent(b).exec(c.ctx, "exit 3"); err != nil || code != 3 {
		t.Fatalf("exit 3 ended with status %d, %v", code, err)
	}
	c.requireStatus(t, c.rt, b.id, runtime.StatusRunning)
	ids, err := c.rt.List(c.ctx)
	if err != nil || !slices.Contains(ids, b.id) {
		t.Fatalf("list %v, %v; want %s in it", ids, err, b.id)
	}
	st, err := c.rt.Stats(c.ctx, b.id)
	if err != nil || st.MemoryBytes == 0 || st.CPUNanos == 0 {
		t.Fatalf("stats %+v, %v; want memory and CPU used", st, err)
	}
}

// testPauseResume: a paused sandbox is frozen (its agent does not answer,
// its runtime has not ended) and continues where it was after Resume.
func testPauseResume(t *testing.T, c *suiteCase) {
	b := c.start(t, nil)
	before := c.startCounter(t, b)
	if err := c.rt.Pause(c.ctx, b.id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	c.requireStatus(t, c.rt, b.id, runtime.StatusPaused)
	if err := c.agent(b).health(c.ctx, time.Second); err == nil {
		t.Fatal("the agent of a paused sandbox answered")
	}
	wctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	if reason, err := c.rt.Wait(wctx, b.id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a paused sandbox: %q, %v; want it still waiting", reason, err)
	}
	if err := c.rt.Resume(c.ctx, b.id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	c.requireStatus(t, c.rt, b.id, runtime.StatusRunning)
	c.agent(b).waitHealthy(t, c.ctx)
	c.requireCounting(t, b, before)
}

// testCheckpointRestore: a checkpoint of a frozen sandbox leaves it
// running, and two restores of the image run side by side, each on its own
// copy of the filesystem, both going on with the memory of the original.
func testCheckpointRestore(t *testing.T, c *suiteCase) {
	a := c.start(t, nil)
	before := c.startCounter(t, a)
	if err := c.rt.Pause(c.ctx, a.id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	image := t.TempDir()
	begin := time.Now()
	if err := c.rt.Checkpoint(c.ctx, a.id, image, true); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Logf("checkpoint took %s", time.Since(begin).Round(time.Millisecond))
	c.requireStatus(t, c.rt, a.id, runtime.StatusPaused)
	copies := []runtime.Rootfs{c.h.CopyRootfs(t, a.rootfs), c.h.CopyRootfs(t, a.rootfs)}
	if err := c.rt.Resume(c.ctx, a.id); err != nil {
		t.Fatalf("resume after checkpoint: %v", err)
	}
	c.requireCounting(t, a, before)

	var branches []*box
	for i := range copies {
		b := c.newBox(t, &copies[i], nil)
		b.token = a.token // the image's agent holds the original's token
		c.restore(t, b, image)
		branches = append(branches, b)
	}
	for _, b := range append(branches, a) {
		c.requireStatus(t, c.rt, b.id, runtime.StatusRunning)
		c.requireCounting(t, b, before)
		c.agent(b).run(t, c.ctx, "echo "+b.id+" > /tmp/who")
	}
	for _, b := range append(branches, a) {
		if got := strings.TrimSpace(c.agent(b).run(t, c.ctx, "cat /tmp/who")); got != b.id {
			t.Fatalf("%s's /tmp/who holds %q: the copies share a filesystem", b.id, got)
		}
	}
}

// testSuspendRestore: a checkpoint that does not leave a running sandbox
// running ends it; the same sandbox restored from the image, in its old
// network slot and on its own filesystem, goes on where it was.
func testSuspendRestore(t *testing.T, c *suiteCase) {
	a := c.start(t, nil)
	before := c.startCounter(t, a)
	image := t.TempDir()
	if err := c.rt.Checkpoint(c.ctx, a.id, image, false); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	c.requireEnded(t, c.rt, a.id)
	wctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if _, err := c.rt.Wait(wctx, a.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("wait on a suspended sandbox: %v; want it ended", err)
	}
	if err := c.rt.Destroy(c.ctx, a.id); err != nil {
		t.Fatalf("destroy after checkpoint: %v", err)
	}
	c.restore(t, a, image)
	c.requireStatus(t, c.rt, a.id, runtime.StatusRunning)
	c.requireCounting(t, a, before)
}

// testDestroy: a destroyed sandbox is gone from State and List, and
// destroying it again, or one never started, is no error.
func testDestroy(t *testing.T, c *suiteCase) {
	b := c.start(t, nil)
	if err := c.rt.Quiesce(c.ctx, b.id); err != nil {
		t.Fatalf("quiesce an idle sandbox: %v", err)
	}
	if err := c.rt.Destroy(c.ctx, b.id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	c.requireStatus(t, c.rt, b.id, "")
	if ids, err := c.rt.List(c.ctx); err != nil || slices.Contains(ids, b.id) {
		t.Fatalf("list after destroy: %v, %v", ids, err)
	}
	if err := c.agent(b).health(c.ctx, time.Second); err == nil {
		t.Fatal("the agent of a destroyed sandbox answered")
	}
	for _, id := range []string{b.id, sandboxid.New()} {
		if err := c.rt.Destroy(c.ctx, id); err != nil {
			t.Fatalf("destroy %s again: %v", id, err)
		}
	}
	if _, err := c.rt.Wait(c.ctx, sandboxid.New()); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("wait on an unknown sandbox: %v; want ErrNotFound", err)
	}
}

// testExitWhenKilled: Wait keeps waiting while the sandbox runs, and
// reports an end that is not the memory limit's when the sandbox's host
// process is killed behind the backend's back.
func testExitWhenKilled(t *testing.T, c *suiteCase) {
	b := c.start(t, nil)
	wctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	if reason, err := c.rt.Wait(wctx, b.id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a running sandbox: %q, %v; want it still waiting", reason, err)
	}
	done := c.waitInBackground(c.rt, b.id)
	kill(t, c, c.rt, b.id)
	if reason := c.exit(t, done, 15*time.Second); reason != runtime.ExitDied {
		t.Fatalf("a killed sandbox ended with %q, want %q", reason, runtime.ExitDied)
	}
	c.requireEnded(t, c.rt, b.id)
}

// testExitOnOOM: an allocation past a small memory limit does not
// succeed. The host ends the sandbox for it and Wait says so (or, with
// a guest kernel, that kernel ends the process and the sandbox runs on).
func testExitOnOOM(t *testing.T, c *suiteCase) {
	limits := c.h.Limits
	limits.MemoryMB = 64
	if c.h.OOMMemoryMB > 0 {
		limits.MemoryMB = c.h.OOMMemoryMB
	}
	if limits.MemoryMB >= 256 {
		t.Fatalf("the OOM case's limit of %d MiB is not below the 256 MiB it allocates", limits.MemoryMB)
	}
	b := c.start(t, &limits)
	c.agent(b).run(t, c.ctx, "dd if=/dev/zero of=/dev/null bs=1M count=8") // fits
	done := c.waitInBackground(c.rt, b.id)
	// The command's stream may never end when the host kills the sandbox
	// under it: the end is the runtime's to report.
	ran := make(chan error, 1)
	go func() {
		code, out, err := c.agent(b).exec(c.ctx, "dd if=/dev/zero of=/dev/null bs=256M count=1")
		if err == nil && code == 0 {
			err = fmt.Errorf("a %d MiB sandbox allocated 256 MiB: %s", limits.MemoryMB, out)
		} else {
			err = nil
		}
		ran <- err
	}()
	if c.h.GuestOOM {
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		c.requireStatus(t, c.rt, b.id, runtime.StatusRunning)
		c.agent(b).run(t, c.ctx, "true")
		return
	}
	reason := c.exit(t, done, 30*time.Second)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	default: // still waiting for an answer from the sandbox that is gone
	}
	if reason != runtime.ExitOOM {
		t.Fatalf("a sandbox past its memory limit ended with %q, want %q", reason, runtime.ExitOOM)
	}
}

// testAdoption: a new backend object on the same state (a restarted
// server) knows the sandboxes of the old one, with their limits, and
// drives them like its own.
func testAdoption(t *testing.T, c *suiteCase) {
	limits := c.h.Limits
	limits.Pids = 1024
	a := c.start(t, &limits)
	p := c.start(t, nil)
	if err := c.rt.Pause(c.ctx, p.id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	rt := c.h.New(t)
	ids, err := rt.List(c.ctx)
	if err != nil || !slices.Contains(ids, a.id) || !slices.Contains(ids, p.id) {
		t.Fatalf("the new backend lists %v, %v; want %s and %s", ids, err, a.id, p.id)
	}
	c.requireStatus(t, rt, a.id, runtime.StatusRunning)
	c.requireStatus(t, rt, p.id, runtime.StatusPaused)
	if got, err := rt.Limits(a.id); err != nil || got != limits {
		t.Fatalf("the new backend reads limits %+v, %v; want %+v", got, err, limits)
	}
	if out := newAgentClient(rt, a.id, a.token).run(t, c.ctx, "echo adopted"); strings.TrimSpace(out) != "adopted" {
		t.Fatalf("exec through the new backend said %q", out)
	}
	if err := rt.Resume(c.ctx, p.id); err != nil {
		t.Fatalf("resume through the new backend: %v", err)
	}
	newAgentClient(rt, p.id, p.token).waitHealthy(t, c.ctx)
	done := c.waitInBackground(rt, a.id)
	kill(t, c, rt, a.id)
	if reason := c.exit(t, done, 15*time.Second); reason != runtime.ExitDied {
		t.Fatalf("an adopted sandbox killed ended with %q, want %q", reason, runtime.ExitDied)
	}
	if err := rt.Destroy(c.ctx, p.id); err != nil {
		t.Fatalf("destroy through the new backend: %v", err)
	}
	c.requireStatus(t, c.rt, p.id, "")
}

// testLimits: a sandbox sees the vCPUs and memory it was given, and the
// backend reads back the limits it was started under.
func testLimits(t *testing.T, c *suiteCase) {
	limits := runtime.Limits{VCPUs: 1, MemoryMB: 192, Pids: 512}
	b := c.start(t, &limits)
	if got, err := c.rt.Limits(b.id); err != nil || got != limits {
		t.Fatalf("limits %+v, %v; want %+v", got, err, limits)
	}
	out := strings.TrimSpace(c.agent(b).run(t, c.ctx, "nproc"))
	if n, err := strconv.Atoi(out); err != nil || n < 1 || n > max(limits.VCPUs, c.h.MinVCPUs) {
		t.Fatalf("a %d-vCPU sandbox has nproc %q", limits.VCPUs, out)
	}
	out = c.agent(b).run(t, c.ctx, "awk '/^MemTotal:/ {print $2}' /proc/meminfo")
	kb, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || kb <= 0 || kb > limits.MemoryMB<<10 {
		t.Fatalf("a %d MiB sandbox has MemTotal %q kB", limits.MemoryMB, out)
	}
	if _, err := c.rt.Limits(sandboxid.New()); err == nil {
		t.Fatal("limits of an unknown sandbox")
	}
}

// kill ends the sandbox's host process, as a crash or the host would.
func kill(t *testing.T, c *suiteCase, rt runtime.Runtime, id string) {
	t.Helper()
	st, err := rt.State(c.ctx, id)
	if err != nil || st.PID <= 0 {
		t.Fatalf("state of %s: %+v, %v; want its host process", id, st, err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", st.PID, err)
	}
}

type waitResult struct {
	reason runtime.ExitReason
	err    error
}

func (c *suiteCase) waitInBackground(rt runtime.Runtime, id string) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		reason, err := rt.Wait(c.ctx, id)
		done <- waitResult{reason, err}
	}()
	return done
}

func (c *suiteCase) exit(t *testing.T, done <-chan waitResult, within time.Duration) runtime.ExitReason {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("wait: %v", r.err)
		}
		return r.reason
	case <-time.After(within):
		t.Fatalf("the runtime reported no end within %s", within)
		return ""
	}
}

// agentClient reaches one sandbox's agent through DialAgent: plain HTTP
// for /health, the Connect process service for commands. Each call hangs
// up when done: a backend's agent channel may take one host connection at
// a time (a VM's virtio-serial port), and a client that left its
// connection open would keep the next one waiting.
type agentClient struct {
	tr    *http2.Transport
	http  *http.Client
	proc  processpbconnect.ProcessClient
	token string
}

func newAgentClient(rt runtime.Runtime, id, token string) *agentClient {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			return rt.DialAgent(ctx, id)
		},
	}
	hc := &http.Client{Transport: tr}
	return &agentClient{tr: tr, http: hc, proc: processpbconnect.NewProcessClient(hc, "http://agent"), token: token}
}

func (a *agentClient) health(ctx context.Context, timeout time.Duration) error {
	defer a.tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/health", nil)
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// waitHealthy waits for the agent to answer; dials fail while the sandbox
// comes up.
func (a *agentClient) waitHealthy(t *testing.T, ctx context.Context) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := a.health(ctx, time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the agent did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exec runs a shell command as root and returns its exit status and
// stdout; err is a failure to run it at all (the sandbox went away).
func (a *agentClient) exec(ctx context.Context, script string) (int, string, error) {
	defer a.tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}})
	req.Header().Set("X-Access-Token", a.token)
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root:
	stream, err := a.proc.Start(ctx, req)
	if err != nil {
		return 0, "", err
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
		}
		if e := ev.GetEnd(); e != nil {
			return int(e.GetExitCode()), out.String(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return 0, "", err
	}
	return 0, "", errors.New("the agent's stream ended without an exit status")
}

// run runs a shell command that must succeed and returns its stdout.
func (a *agentClient) run(t *testing.T, ctx context.Context, script string) string {
	t.Helper()
	code, out, err := a.exec(ctx, script)
	if err != nil || code != 0 {
		t.Fatalf("%q: status %d, %v: %s", script, code, err, out)
	}
	return out
}

// testIsolation: the backend names what it isolates with in the terms
// sandbox objects report.
func testIsolation(t *testing.T, c *suiteCase) {
	switch iso := c.rt.Isolation(); iso {
	case runtime.IsolationGVisor, runtime.IsolationMicroVMKVM, runtime.IsolationMicroVMTCG:
	default:
		t.Fatalf("Isolation() = %q, want one of %q, %q, %q", iso, runtime.IsolationGVisor, runtime.IsolationMicroVMKVM, runtime.IsolationMicroVMTCG)
	}
}
