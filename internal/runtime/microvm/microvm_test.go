package microvm

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/http2"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/testtier"
)

// env is what every VM test shares, made once in TestMain: the agent
// binary, a btrfs pool on a loop image, and a template root image (a
// busybox-static tree like the minimal template's) in its own subvolume.
var env struct {
	skip     string
	kernel   Kernel
	agent    string
	pool     *storage.Pool
	template string // the template's root image
	dir      string
}

func TestMain(m *testing.M) {
	code, cleanup := setup()
	if code == 0 {
		code = m.Run()
	}
	cleanup()
	os.Exit(code)
}

func setup() (int, func()) {
	nothing := func() {}
	if os.Geteuid() != 0 {
		env.skip = "needs root (QEMU in cgroups, btrfs, netns)"
		return 0, nothing
	}
	if flag.Parse(); testtier.Quick() {
		env.skip = testtier.FullOnly + "boots microVM guests under TCG"
		return 0, nothing
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		env.skip = "no qemu-system-x86_64 (scripts/install-deps.sh)"
		return 0, nothing
	}
	kdir := repoPath(".tools/microvm/current")
	if d := os.Getenv("SPACE_MICROVM_KERNEL"); d != "" {
		kdir = d // as space serve takes it
	}
	k, err := LoadKernel(kdir)
	if err != nil {
		env.skip = err.Error()
		return 0, nothing
	}
	env.kernel = k
	dir, err := os.MkdirTemp("", "microvm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, nothing
	}
	env.dir = dir
	cleanup := func() {
		if env.pool != nil {
			if err := env.pool.Unmount(); err != nil {
				fmt.Fprintln(os.Stderr, "unmount test pool:", err)
			}
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (int, func()) {
		fmt.Fprintln(os.Stderr, "microvm test setup:", err)
		return 1, cleanup
	}
	env.agent = filepath.Join(dir, "space-agent")
	build := exec.Command("go", "build", "-o", env.agent, "./cmd/space-agent")
	build.Dir = repoPath("")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("build agent: %v: %s", err, out))
	}
	env.pool, err = storage.Open(context.Background(), storage.Options{
		Root: filepath.Join(dir, "volumes"), ImagePath: filepath.Join(dir, "volumes.img"), ImageSizeBytes: 4 << 30,
	})
	if err != nil {
		return fail(err)
	}
	if env.pool.Kind() != storage.KindBtrfs {
		return fail(errors.New("test pool is not btrfs"))
	}
	tplDir, err := env.pool.Create("template")
	if err != nil {
		return fail(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := busyboxTree(rootfs); err != nil {
		return fail(err)
	}
	env.template = filepath.Join(tplDir, "rootfs.img")
	if err := BuildImage(context.Background(), rootfs, env.template, 0); err != nil {
		return fail(err)
	}
	return 0, cleanup
}

func repoPath(rel string) string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", "..", rel)
}

// busyboxTree makes a root filesystem of busybox-static and its applets.
func busyboxTree(root string) error {
	for _, d := range []string{"bin", "etc", "tmp", "root", "www"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(root, "bin", "busybox")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy busybox: %v: %s", err, out)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(list)) {
		if name != "busybox" {
			_ = os.Symlink("busybox", filepath.Join(root, "bin", name))
		}
	}
	files := map[string]string{
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":      "root:x:0:\n",
		"www/index.html": "hello from the guest\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func requireEnv(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
}

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	requireEnv(t)
	r, err := New(context.Background(), Config{
		Kernel: env.kernel, StateDir: filepath.Join(env.dir, "state-"+t.Name()), Accel: "tcg",
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// sandboxImage clones the template's image into a subvolume of its own.
func sandboxImage(t *testing.T, name string) string {
	t.Helper()
	dir, err := env.pool.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.pool.Delete(name) })
	img := filepath.Join(dir, "rootfs.img")
	if err := CloneImage(context.Background(), env.template, img); err != nil {
		t.Fatal(err)
	}
	return img
}

func testSpec(t *testing.T, id string) runtime.Spec {
	return runtime.Spec{
		ID: id, Rootfs: runtime.Rootfs{Kind: runtime.RootfsBlock, Path: sandboxImage(t, "sb-"+id)}, Agent: env.agent,
		Env:      []string{"PATH=/bin", "SPACE_AGENT_TOKEN=boot-" + id},
		Hostname: id, Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128},
	}
}

// client speaks to one guest's agent over DialAgent, as the node does;
// close cuts every connection it dialed, as the node's reset does (the
// port serves one host connection at a time).
type client struct {
	proc  processpbconnect.ProcessClient
	http  *http.Client
	tr    *http2.Transport
	mu    sync.Mutex
	conns []net.Conn
}

func newClient(r *Runtime, id string) *client {
	c := &client{}
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			// Generous: a guest session that missed its host's hang-up
			// (a pause across it) ends only when the new HELLO reaches
			// its HTTP/2 server as a protocol error (about a second).
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			conn, err := r.DialAgent(ctx, id)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	}
	c.http = &http.Client{Transport: tr}
	c.tr = tr
	c.proc = processpbconnect.NewProcessClient(c.http, "http://agent")
	return c
}

func (c *client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
	c.tr.CloseIdleConnections()
}

func (c *client) health(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/health", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// waitReady polls /health until the agent answers.
func (c *client) waitReady(t *testing.T, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := c.health(ctx)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("agent not ready after %s: %v", bound, err)
		}
		c.close()
		time.Sleep(50 * time.Millisecond)
	}
}

// start starts sh -c script in the guest.
func (c *client) start(ctx context.Context, token, script string) (*connect.ServerStreamForClient[processpb.StartResponse], error) {
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}})
	req.Header().Set("X-Access-Token", token)
	return c.proc.Start(ctx, req)
}

// run executes sh -c script in the guest and returns stdout.
func (c *client) run(t *testing.T, token, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := c.start(ctx, token, script)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errOut.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			if e.GetExitCode() != 0 {
				t.Fatalf("exec %q: exit %d: %s", script, e.GetExitCode(), errOut.String())
			}
			return out.String()
		}
	}
	t.Fatalf("exec %q: stream ended without an end event: %v", script, stream.Err())
	return ""
}

func startVM(t *testing.T, r *Runtime, spec runtime.Spec) (*client, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Destroy(context.Background(), spec.ID) })
	dumpLogsOnFailure(t, r, spec.ID)
	c := newClient(r, spec.ID)
	t.Cleanup(c.close)
	c.waitReady(t, 90*time.Second)
	return c, time.Since(start)
}

// dumpLogsOnFailure logs the guest's console and QEMU's output if the
// test fails (registered after Destroy's cleanup, so it runs before it).
func dumpLogsOnFailure(t *testing.T, r *Runtime, id string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, f := range []string{"console.log", "qemu.log"} {
			data, _ := os.ReadFile(filepath.Join(r.dir(id), f))
			t.Logf("%s of %s:\n%s", f, id, data)
		}
	})
}

// assertGone checks that a destroyed guest left no QEMU, cgroup or state.
func assertGone(t *testing.T, r *Runtime, id string, pid int) {
	t.Helper()
	if processRuns(pid) {
		t.Errorf("QEMU %d still runs after destroy", pid)
	}
	_, dirs := cgroupDirs(id)
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
	if _, err := os.Stat(r.dir(id)); err == nil {
		t.Errorf("state directory left behind")
	}
	if _, err := r.State(context.Background(), id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after destroy: %v, want ErrNotFound", err)
	}
}

// processRuns reports whether pid is a live process: a zombie has
// exited (a test's first backend object reaps its QEMU a moment after an
// adopting one saw it end).
func processRuns(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func TestBootExecPauseResumeDestroy(t *testing.T) {
	r := newRuntime(t)
	spec := testSpec(t, "boot1")
	// A disk limit above the image's size: a cold boot grows it too.
	fi, err := os.Stat(spec.Rootfs.Path)
	if err != nil {
		t.Fatal(err)
	}
	spec.Rootfs.Bytes = fi.Size() + 64<<20
	c, boot := startVM(t, r, spec)
	t.Logf("cold boot to agent ready (TCG, 128 MiB, 1 vCPU): %s", boot.Round(time.Millisecond))

	token := "boot-boot1"
	if got := c.run(t, token, "echo hi from $(hostname); cat /proc/1/comm; grep ' / ' /proc/mounts | cut -d' ' -f3"); got != "hi from boot1\ninit\next4\n" {
		t.Errorf("exec output %q", got)
	}
	waitRootGrown(t, c, token, spec.Rootfs.Bytes)
	// The agent is read-only at its mount point.
	if got := c.run(t, token, "touch /.space/bin/x 2>&1 || echo refused"); !strings.Contains(got, "refused") {
		t.Errorf("agent directory is writable: %q", got)
	}

	// A fresh connection after the host side closed: the channel serves it.
	c.close()
	c2 := newClient(r, spec.ID)
	defer c2.close()
	redial := time.Now()
	if got := c2.run(t, token, "echo again"); got != "again\n" {
		t.Errorf("after redial: %q", got)
	}
	t.Logf("redial and exec: %s", time.Since(redial).Round(time.Millisecond))

	st, err := r.State(context.Background(), spec.ID)
	if err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("State = %+v, %v; want running", st, err)
	}
	pauseStart := time.Now()
	if err := r.Pause(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	pauseTook := time.Since(pauseStart)
	if st, _ := r.State(context.Background(), spec.ID); st.Status != runtime.StatusPaused {
		t.Errorf("State after pause = %s", st.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	if err := c2.health(ctx); err == nil {
		t.Error("a paused guest answered /health")
	}
	cancel()
	c2.close()
	resumeStart := time.Now()
	if err := r.Resume(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	resumeTook := time.Since(resumeStart)
	c3 := newClient(r, spec.ID)
	defer c3.close()
	redial = time.Now()
	if got := c3.run(t, token, "echo resumed"); got != "resumed\n" {
		t.Errorf("after resume: %q", got)
	}
	t.Logf("redial across a pause and exec: %s", time.Since(redial).Round(time.Millisecond))
	t.Logf("pause %s, resume %s", pauseTook.Round(time.Microsecond), resumeTook.Round(time.Microsecond))

	lim, err := r.Limits(spec.ID)
	if err != nil || lim.MemoryMB != 128 || lim.VCPUs != 1 {
		t.Errorf("Limits = %+v, %v", lim, err)
	}
	if got := c3.run(t, token, "grep MemTotal /proc/meminfo; grep -c ^processor /proc/cpuinfo"); !strings.Contains(got, "\n1\n") {
		t.Errorf("guest sees %q", got)
	}
	_, dirs := cgroupDirs(spec.ID)
	pid := st.PID
	procs, _ := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
	if !strings.Contains(string(procs), fmt.Sprint(pid)) {
		t.Errorf("QEMU %d is not in its cgroup %s (%q)", pid, dirs[0], procs)
	}
	// QEMU runs as the sandbox's own user, without capabilities, under
	// its seccomp filter (-sandbox), chrooted.
	uid, _ := assertUnprivileged(t, r, spec.ID)
	if leaseHolder(uid) != r.dir(spec.ID) {
		t.Errorf("uid %d is not leased to the sandbox", uid)
	}

	// A new backend object finds the running guest again.
	r.Close()
	r2 := newRuntimeAt(t, r.cfg.StateDir)
	ids, err := r2.List(context.Background())
	if err != nil || len(ids) != 1 || ids[0] != spec.ID {
		t.Errorf("List after restart = %v, %v", ids, err)
	}
	if st, err := r2.State(context.Background(), spec.ID); err != nil || st.Status != runtime.StatusRunning || st.PID != pid {
		t.Errorf("adopted State = %+v, %v", st, err)
	}

	waited := waitAsync(r2, spec.ID)
	if err := r2.Destroy(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case reason := <-waited:
		if reason.OOM {
			t.Errorf("a destroyed guest reported OOM")
		}
	case <-time.After(10 * time.Second):
		t.Error("Wait did not return after destroy")
	}
	assertGone(t, r2, spec.ID, pid)
	if leaseHolder(uid) == r.dir(spec.ID) {
		t.Errorf("destroy left uid %d leased", uid)
	}
}

func newRuntimeAt(t *testing.T, stateDir string) *Runtime {
	r, err := New(context.Background(), Config{Kernel: env.kernel, StateDir: stateDir, Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGuestExitReported(t *testing.T) {
	r := newRuntime(t)
	spec := testSpec(t, "exit1")
	c, _ := startVM(t, r, spec)
	waited := waitAsync(r, spec.ID)
	// The guest's kernel reboots (QEMU has -no-reboot): QEMU exits.
	_ = runNoWait(c, "boot-exit1", "echo b > /proc/sysrq-trigger")
	select {
	case reason := <-waited:
		if reason.OOM || reason.Status != 0 {
			t.Errorf("exit reason %+v, want a clean exit", reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not report the guest's exit")
	}
	if st, err := r.State(context.Background(), spec.ID); err != nil || st.Status != runtime.StatusStopped {
		t.Errorf("State after exit = %+v, %v", st, err)
	}
	// A backend object that never saw the guest run (a node restart
	// after its exit) frees its uid at the destroy all the same.
	v, _ := r.lookup(spec.ID)
	r.Close()
	r2 := newRuntimeAt(t, r.cfg.StateDir)
	if err := r2.Destroy(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	if v == nil || v.conf.UID == 0 || leaseHolder(v.conf.UID) == r.dir(spec.ID) {
		t.Errorf("the exited guest's uid is still leased to it (%+v)", v)
	}
}

func TestOOMReported(t *testing.T) {
	r := newRuntime(t)
	spec := testSpec(t, "oom1")
	c, _ := startVM(t, r, spec)
	// Squeeze the cgroup to just above what QEMU uses now, then let the
	// guest touch memory it has never used: QEMU grows past the limit.
	v2, dirs := cgroupDirs(spec.ID)
	limitFile, usageFile := "memory.limit_in_bytes", "memory.usage_in_bytes"
	if v2 {
		limitFile, usageFile = "memory.max", "memory.current"
	}
	var memDir string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, usageFile)); err == nil {
			memDir = d
			break
		}
	}
	if memDir == "" {
		t.Fatal("no memory cgroup")
	}
	usage, _ := os.ReadFile(filepath.Join(memDir, usageFile))
	var used int64
	fmt.Sscan(strings.TrimSpace(string(usage)), &used)
	if err := os.WriteFile(filepath.Join(memDir, limitFile), []byte(fmt.Sprint(used+1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	waited := waitAsync(r, spec.ID)
	_ = runNoWait(c, "boot-oom1", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=50")
	select {
	case reason := <-waited:
		if !reason.OOM {
			t.Errorf("exit reason %+v, want OOM", reason)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("QEMU was not killed for its memory limit")
	}
}

// waitAsync runs Wait in the background and delivers its reason.
func waitAsync(r *Runtime, id string) <-chan exitStatus {
	waited := make(chan exitStatus, 1)
	go func() {
		reason, _ := r.wait(context.Background(), id)
		waited <- reason
	}()
	return waited
}

// runNoWait starts a command and does not wait for it (it ends the guest).
func runNoWait(c *client, token, script string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := c.start(ctx, token, script)
	if err != nil {
		return err
	}
	stream.Receive()
	return stream.Close()
}

func TestSuspendAndRestoreTwice(t *testing.T) {
	r := newRuntime(t)
	spec := testSpec(t, "orig")
	c, _ := startVM(t, r, spec)
	token := "boot-orig"
	c.run(t, token, "echo 1 > /root/counter; sync")
	// A process that must live on in every restore (memory state).
	sleeper := strings.TrimSpace(c.run(t, token, "sleep 100000 >/dev/null 2>&1 & echo $!"))
	st, _ := r.State(context.Background(), spec.ID)

	image := filepath.Join(env.pool.Path("sb-orig"), "image")
	suspend := time.Now()
	if err := r.Checkpoint(context.Background(), spec.ID, image, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("suspend (stop, migrate to file, quit): %s", time.Since(suspend).Round(time.Millisecond))
	c.close()
	assertGone(t, r, spec.ID, st.PID)
	if fi, err := os.Stat(filepath.Join(image, "state")); err != nil || fi.Size() == 0 {
		t.Fatalf("no state file: %v", err)
	} else {
		t.Logf("state file: %d KiB", fi.Size()>>10)
	}

	// Two restores of the one image, side by side.
	clients := map[string]*client{}
	var grownTo int64
	for _, id := range []string{"branch1", "branch2"} {
		bs := testSpec(t, id)
		// What a snapshot of the suspended sandbox's volume holds.
		_ = os.Remove(bs.Rootfs.Path)
		if err := CloneImage(context.Background(), spec.Rootfs.Path, bs.Rootfs.Path); err != nil {
			t.Fatal(err)
		}
		if id == "branch2" {
			// A larger disk limit than the image's: the restored guest
			// learns of its grown disk and grows its filesystem.
			fi, err := os.Stat(bs.Rootfs.Path)
			if err != nil {
				t.Fatal(err)
			}
			grownTo = fi.Size() + 96<<20
			bs.Rootfs.Bytes = grownTo
		}
		start := time.Now()
		if err := r.Restore(context.Background(), bs, image); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Destroy(context.Background(), id) })
		bc := newClient(r, id)
		t.Cleanup(bc.close)
		bc.waitReady(t, 30*time.Second)
		t.Logf("restore %s from file to agent ready: %s", id, time.Since(start).Round(time.Millisecond))
		clients[id] = bc
	}
	// Each runs as a user of its own: neither can reach the other.
	uid1, pid1 := assertUnprivileged(t, r, "branch1")
	uid2, pid2 := assertUnprivileged(t, r, "branch2")
	if uid1 == uid2 {
		t.Errorf("two restores of one image share uid %d", uid1)
	}
	assertCannotReach(t, uid1, r.dir("branch1"), pid2, r.dir("branch2"))
	assertCannotReach(t, uid2, r.dir("branch2"), pid1, r.dir("branch1"))
	waitRootGrown(t, clients["branch2"], token, grownTo)
	// Each continues from the image: the counter, the running sleeper.
	for id, bc := range clients {
		if got := bc.run(t, token, "cat /root/counter; kill -0 "+sleeper+" && echo alive"); got != "1\nalive\n" {
			t.Errorf("%s after restore: %q", id, got)
		}
	}
	clients["branch1"].run(t, token, "echo 2 > /root/counter; sync")
	clients["branch2"].run(t, token, "echo 10 > /root/counter; sync")
	for id, want := range map[string]string{"branch1": "2\n", "branch2": "10\n"} {
		if got := clients[id].run(t, token, "cat /root/counter"); got != want {
			t.Errorf("%s counter = %q, want %q", id, got, want)
		}
	}

	// A snapshot that leaves the guest running, then a restore of it.
	snap := filepath.Join(env.pool.Path("sb-branch1"), "snap")
	if err := r.Checkpoint(context.Background(), "branch1", snap, true); err != nil {
		t.Fatal(err)
	}
	clients["branch1"].close()
	if got := clients["branch1"].run(t, token, "cat /root/counter"); got != "2\n" {
		t.Errorf("branch1 after its snapshot: %q", got)
	}
}

// waitRootGrown waits until the guest's root disk is bytes and its root
// filesystem fills it (less ext4's own overhead).
func waitRootGrown(t *testing.T, c *client, token string, bytes int64) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got = c.run(t, token, "cat /sys/block/vda/size; df -k / | awk 'NR==2 {print $2}'")
		var sectors, fsKiB int64
		if _, err := fmt.Sscan(got, &sectors, &fsKiB); err == nil && sectors*512 == bytes && fsKiB<<10 >= bytes*9/10 {
			return
		}
	}
	t.Fatalf("the guest's disk and root filesystem (sectors, KiB): %q, want a disk of %d bytes filled", got, bytes)
}

func TestNetworkThroughSlot(t *testing.T) {
	r := newRuntime(t)
	nss, err := network.OpenNamespaces(filepath.Join(env.dir, "netns"))
	if err != nil {
		t.Fatal(err)
	}
	defer nss.Close() // it mounts its directory
	slot, err := nss.Create("vmnet1")
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Destroy()
	spec := testSpec(t, "net1")
	spec.Network = slot
	c, _ := startVM(t, r, spec)
	token := "boot-net1"
	got := c.run(t, token, "ip -o -4 addr show eth0 | tr -s ' ' | cut -d' ' -f4; cat /sys/class/net/eth0/address; httpd -p 8080 -h /www")
	lines := strings.Fields(got)
	if len(lines) < 2 || lines[0] != network.SandboxAddr+"/30" {
		t.Fatalf("guest eth0: %q", got)
	}
	// The guest's MAC is the veth's.
	if veth := vethMAC(t, slot); lines[1] != veth {
		t.Errorf("guest MAC %s, veth %s", lines[1], veth)
	}
	// From the gateway side of the veth, as the slot's egress sees it.
	hc := &http.Client{Transport: &http.Transport{DialContext: slot.DialContext}, Timeout: 20 * time.Second}
	resp, err := hc.Get("http://" + network.SandboxAddr + ":8080/index.html")
	if err != nil {
		t.Fatalf("TCP to the guest through the slot: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from the guest\n" {
		t.Errorf("body %q", body)
	}
	// And the guest reaches its gateway.
	if got := c.run(t, token, "ping -c 1 -W 5 "+network.GatewayAddr+" >/dev/null && echo ok"); got != "ok\n" {
		t.Errorf("ping gateway: %q", got)
	}

	st, _ := r.State(context.Background(), spec.ID)
	if err := r.Destroy(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, spec.ID, st.PID)
	if taps := linksIn(t, slot); strings.Contains(taps, tapName) {
		t.Errorf("tap left in the slot: %s", taps)
	}
}

func vethMAC(t *testing.T, slot *network.Slot) string {
	ns, err := netns.GetFromPath(slot.NetNSPath())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().HardwareAddr.String()
}

func linksIn(t *testing.T, slot *network.Slot) string {
	out, err := exec.Command("nsenter", "--net="+slot.NetNSPath(), "/sbin/ip", "-o", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestProbeFallsBackWithoutHanging(t *testing.T) {
	requireEnv(t)
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	work := filepath.Join(env.dir, "probe-test")
	// The probe guest itself works: under TCG it prints its marker.
	// (TCG is slow on a busy host: this bound is only for the check.)
	took, err := Probe(context.Background(), qemu, env.kernel, "tcg", work, time.Minute)
	if err != nil {
		t.Fatalf("TCG probe: %v", err)
	}
	t.Logf("probe guest under TCG: %s", took.Round(time.Millisecond))
	start := time.Now()
	accel, err := ChooseAccel(context.Background(), qemu, env.kernel, "auto", work, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("auto chose %s in %s", accel, elapsed.Round(time.Millisecond))
	if elapsed > ProbeBound+5*time.Second {
		t.Errorf("the probe took %s, beyond its bound %s", elapsed, ProbeBound)
	}
	// On this project's machines /dev/kvm is nested PVM, where the probe
	// guest hangs: auto must fall back.
	if os.Getenv("SPACE_EXPECT_KVM") == "" && accel != "tcg" {
		t.Errorf("auto chose %s; this machine's KVM should fail the probe", accel)
	}
	if out, _ := exec.Command("pgrep", "-f", work).Output(); len(out) > 0 {
		t.Errorf("probe QEMU left running: %s", out)
	}
}

func TestChannelSelection(t *testing.T) {
	spec := runtime.Spec{ID: "c1", Hostname: "c1"}
	serial := vmConfig{Machine: "microvm", Accel: "tcg", Rootfs: "/x.img", Kernel: "/k", Initramfs: "/i"}
	serial.Cmdline = kernelCmdline(spec, serial)
	args := strings.Join(qemuArgs("/s/c1", serial), " ")
	if !strings.Contains(args, "virtserialport,chardev=agent,name=space.agent") || strings.Contains(args, "vsock") {
		t.Errorf("serial channel args: %s", args)
	}
	if !strings.Contains(serial.Cmdline, "space_chan=serial:space.agent") {
		t.Errorf("serial cmdline: %s", serial.Cmdline)
	}
	vs := serial
	vs.Vsock = cidFor("c1")
	vs.Cmdline = kernelCmdline(spec, vs)
	args = strings.Join(qemuArgs("/s/c1", vs), " ")
	if !strings.Contains(args, fmt.Sprintf("vhost-vsock-device,guest-cid=%d", vs.Vsock)) || strings.Contains(args, "virtserialport") {
		t.Errorf("vsock channel args: %s", args)
	}
	if !strings.Contains(vs.Cmdline, "space_chan=vsock:49983") {
		t.Errorf("vsock cmdline: %s", vs.Cmdline)
	}
	if vs.Vsock < 3 {
		t.Errorf("CID %d is reserved", vs.Vsock)
	}
	q35 := serial
	q35.Machine = "q35"
	if args := strings.Join(qemuArgs("/s/c1", q35), " "); !strings.Contains(args, "virtio-blk-pci") || !strings.Contains(args, "virtio-serial-pci") {
		t.Errorf("q35 args: %s", args)
	}
	// This machine has no /dev/vhost-vsock: guests get virtio-serial.
	if _, err := os.Stat("/dev/vhost-vsock"); err != nil && vsockAvailable() {
		t.Error("vsock reported available without /dev/vhost-vsock")
	}
}

// A spec the microVM cannot run is refused as unsupported before anything
// is made: a directory root filesystem, and persistent volume mounts on a
// restore (no image of a guest with shares exists to restore them into).
func TestRefusesDirRootfsAndRestoredMounts(t *testing.T) {
	r := &Runtime{} // nothing past the spec check is reached
	block := runtime.Rootfs{Kind: runtime.RootfsBlock, Path: "/nonexistent.img"}
	dir := runtime.Spec{ID: "r1", Rootfs: runtime.Rootfs{Kind: runtime.RootfsDir, Path: "/nonexistent"}}
	mounts := runtime.Spec{ID: "r2", Rootfs: block, Mounts: []runtime.Mount{{Source: "/v", Destination: "/data"}}}
	for name, err := range map[string]error{
		"dir start":      r.Start(context.Background(), dir),
		"dir restore":    r.Restore(context.Background(), dir, "/nonexistent"),
		"mounts restore": r.Restore(context.Background(), mounts, "/nonexistent"),
	} {
		if !errors.Is(err, runtime.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "/nonexistent") {
			t.Errorf("%s: the error names a host path: %v", name, err)
		}
	}
}

// BootFloor boots a guest as Start would, outside the backend, and times
// it to the agent's ready line; the agent then answers the handshake, and
// no QEMU is left.
func TestBootFloor(t *testing.T) {
	requireEnv(t)
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	work := filepath.Join(env.dir, "floor-test")
	initramfs, err := env.kernel.Initramfs(env.agent, work)
	if err != nil {
		t.Fatal(err)
	}
	took, err := BootFloor(context.Background(), qemu, env.kernel, "tcg", initramfs, sandboxImage(t, "floor"), work,
		runtime.Limits{VCPUs: 1, MemoryMB: 128}, 2*time.Minute)
	if err != nil || took <= 0 {
		t.Fatalf("boot floor: %s, %v", took, err)
	}
	t.Logf("bare QEMU to the agent under TCG: %s", took.Round(time.Millisecond))
	if out, _ := exec.Command("pgrep", "-f", work).Output(); len(out) > 0 {
		t.Errorf("QEMU left running: %s", out)
	}
}
