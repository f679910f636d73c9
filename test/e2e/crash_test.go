package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// crashServer is a `space serve` process that the test kills with SIGKILL.
type crashServer struct {
	t       *testing.T
	dataDir string
	listen  string
	// crashFile, when set, is the file SPACE_TEST_CRASH_AT names: the
	// server kills itself at the crash point written into it
	// (internal/crashpoint).
	crashFile string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the process has ended
	client    *client.Client

	// store, when set, is the server's --store (a postgres:// URL).
	store string
	// agent, when set, is the server's --agent (an upgrade's).
	agent string
	// binary, when set, is the space binary to start (an older
	// release's).
	binary string
}

func (s *crashServer) start() {
	t := s.t
	agent := env.cfg.AgentPath
	if s.agent != "" {
		agent = s.agent
	}
	binary := filepath.Join(env.binDir, "space")
	if s.binary != "" {
		binary = s.binary
	}
	s.cmd = exec.Command(binary, "serve",
		"--data-dir", s.dataDir, "--listen", s.listen, "--build-templates", "minimal",
		"--runsc", env.cfg.RunscPath, "--agent", agent, "--default-template", "minimal",
		"--volume-image-gib", "8", "--pool", "", "--e2b-listen", "", "--proxy-listen", "")
	if s.store != "" {
		s.cmd.Args = append(s.cmd.Args, "--store", s.store)
	}
	log, err := os.OpenFile(filepath.Join(s.dataDir, "..", "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if s.crashFile != "" {
		s.cmd.Env = append(os.Environ(), "SPACE_TEST_CRASH_AT="+s.crashFile)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(s.cmd, s.exited)
	deadline := time.Now().Add(time.Minute)
	for {
		key, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
		if err == nil {
			s.client = client.New("http://"+s.listen, strings.TrimSpace(string(key)))
			if tpl, err := s.client.GetTemplate(context.Background(), "minimal"); err == nil && tpl.State == apiv1.TemplateReady {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("crash server did not come up; see %s", filepath.Join(s.dataDir, "..", "serve.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the server for good, shows its log if the test failed, and
// unmounts what it mounted.
func (s *crashServer) stop(base string) {
	s.kill()
	if s.t.Failed() {
		log, _ := os.ReadFile(filepath.Join(base, "serve.log"))
		s.t.Logf("server log:\n%s", log)
	}
	releaseDataDir(s.dataDir)
}

// kill ends the server with SIGKILL: no cleanup of any kind runs.
func (s *crashServer) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// died reports whether the server ended (at its crash point) within d.
func (s *crashServer) died(d time.Duration) bool {
	select {
	case <-s.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// newCrashServer starts a separate server in a fresh directory (skipping
// the test where that cannot be done), and stops it when the test ends.
// With crashPoints, it can be told to kill itself (crashServer.crashFile).
func newCrashServer(t *testing.T, crashPoints bool) *crashServer {
	requireServer(t)
	testtier.Full(t, "starts and kills a separate server")
	base := t.TempDir()
	s := &crashServer{t: t, dataDir: filepath.Join(base, "data"), listen: freePort(t)}
	if crashPoints {
		s.crashFile = filepath.Join(base, "crash-at")
	}
	s.start()
	t.Cleanup(func() { s.stop(base) })
	return s
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Killing the server at any moment loses nothing that was acknowledged and
// leaves nothing behind once everything is deleted.
func TestCrashRecovery(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)
	wait := func(id, state string) *apiv1.Sandbox {
		t.Helper()
		sb, err := s.client.WaitSandbox(ctx, id, state, time.Minute)
		if err != nil {
			t.Fatalf("wait %s for %s: %v", id, state, err)
		}
		return sb
	}
	create := func() string {
		sb, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	acknowledged := map[string]map[string]string{} // sandbox → path → content
	write := func(id, path, content string) error {
		if _, err := s.client.WriteFile(ctx, id, path, strings.NewReader(content)); err != nil {
			return err
		}
		if acknowledged[id] == nil {
			acknowledged[id] = map[string]string{}
		}
		acknowledged[id][path] = content
		return nil
	}
	a := create()
	wait(a, apiv1.StateRunning)
	if err := write(a, "/home/user/first.txt", "acknowledged before any crash"); err != nil {
		t.Fatal(err)
	}

	// 1. Killed right after acknowledging a create.
	b := create()
	s.kill()
	s.start()
	wait(a, apiv1.StateRunning)
	wait(b, apiv1.StateRunning)

	// 2. Killed in the middle of a stream of file writes.
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for i := 0; ; i++ {
			if write(b, fmt.Sprintf("/home/user/w/%03d.txt", i), fmt.Sprintf("write %d", i)) != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	s.kill()
	writes.Wait()
	s.start()
	wait(b, apiv1.StateRunning)

	// 3. Killed during a suspend, then during a branch, at a few moments.
	for _, c := range []struct {
		op    string
		delay time.Duration
	}{{"suspend", 10 * time.Millisecond}, {"suspend", 60 * time.Millisecond}, {"branch", 20 * time.Millisecond}, {"branch", 120 * time.Millisecond}} {
		op := c.op
		done := make(chan struct{})
		go func() {
			defer close(done)
			if op == "suspend" {
				_, _ = s.client.Suspend(ctx, a)
			} else {
				_, _ = s.client.Branch(ctx, a, 3)
			}
		}()
		time.Sleep(c.delay)
		s.kill()
		<-done
		s.start()
		got, err := s.client.GetSandbox(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != apiv1.StateRunning && got.State != apiv1.StateSuspended {
			t.Fatalf("after a crash during %s the sandbox is %s (%s)", op, got.State, got.Reason)
		}
		t.Logf("after a crash during %s: %s (%s)", op, got.State, got.Reason)
		execOK2(t, s.client, a) // auto-resumes a suspended one
	}

	// Every acknowledged write is there.
	for id, files := range acknowledged {
		for path, content := range files {
			r, err := s.client.ReadFile(ctx, id, path)
			if err != nil {
				t.Fatalf("acknowledged write %s:%s lost: %v", id, path, err)
			}
			got := make([]byte, len(content)+1)
			n, _ := r.Read(got)
			r.Close()
			if string(got[:n]) != content {
				t.Fatalf("acknowledged write %s:%s holds %q, want %q", id, path, got[:n], content)
			}
		}
	}
	t.Logf("%d acknowledged writes survived", len(acknowledged[a])+len(acknowledged[b]))

	// Delete everything: nothing of this server may remain.
	list, err := s.client.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if err := s.client.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("delete %s: %v", sb.ID, err)
		}
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	s.checkNothingLeft(ids)
}

// checkNothingLeft checks, once every sandbox was deleted, that none of
// ids left processes, network namespaces, volumes, runtime bundles or
// mounts behind.
func (s *crashServer) checkNothingLeft(ids []string) {
	t := s.t
	t.Helper()
	for _, dir := range []string{"sandboxes", "restoring", "previous"} {
		if vols, _ := os.ReadDir(filepath.Join(s.dataDir, "volumes", dir)); len(vols) != 0 {
			t.Errorf("%d volumes left in %s", len(vols), dir)
		}
	}
	for _, id := range ids {
		if n := runtimeProcesses(id); n != 0 {
			t.Errorf("%d processes of %s left", n, id)
		}
		if left := namespaceFiles(s.dataDir, id); len(left) > 0 {
			t.Errorf("network namespace of %s left: %v", id, left)
		}
	}
	bundles, _ := os.ReadDir(filepath.Join(s.dataDir, "runtime", "bundles"))
	if len(bundles) != 0 {
		t.Errorf("%d runtime bundles left", len(bundles))
	}
	// The record of which agent each sandbox (and each template's build
	// sandbox) runs goes with it.
	if records, _ := os.ReadDir(filepath.Join(s.dataDir, "node", "agents", "sandboxes")); len(records) != 0 {
		t.Errorf("%d agent records left, the first %s", len(records), records[0].Name())
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], s.dataDir) &&
			f[4] != filepath.Join(s.dataDir, "volumes") && f[4] != filepath.Join(s.dataDir, "netns") && !strings.HasSuffix(f[4], "null-netns") {
			t.Errorf("mount left: %s", f[4])
		}
	}
}

// loseRuntime kills a sandbox's processes, as a host reboot would.
func loseRuntime(id string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// reboot is a host reboot as the server sees it: the server, the runtimes
// of ids and every namespace die, and the server starts again.
func (s *crashServer) reboot(ids []string) {
	s.kill()
	for _, id := range ids {
		loseRuntime(id)
	}
	// As after a reboot, the namespace files stay as plain files without
	// their mounts, and the directory is no mount of itself any more.
	storage.UnmountUnder(filepath.Join(s.dataDir, "netns"))
	_ = syscall.Unmount(filepath.Join(s.dataDir, "netns"), syscall.MNT_DETACH)
	time.Sleep(200 * time.Millisecond)
	s.start()
}

func execOK2(t *testing.T, c *client.Client, id string) {
	t.Helper()
	res, err := c.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		events, _ := c.Events(testContext(t), id)
		for _, e := range events {
			t.Logf("event %s %s → %s %s", e.Type, e.From, e.To, e.Message)
		}
		t.Fatalf("exec in %s: %+v, %v", id, res, err)
	}
}

// A host reboot takes every runtime and network namespace away. Suspended
// sandboxes come back suspended; running ones come back from their disk,
// flagged as recovered.
func TestHostRebootRecovery(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)
	var ids []string
	for i := 0; i < 2; i++ {
		sb, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.WriteFile(ctx, sb.ID, "/home/user/kept.txt", strings.NewReader("on disk")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	running, suspended := ids[0], ids[1]
	if _, err := s.client.Suspend(ctx, suspended); err != nil {
		t.Fatal(err)
	}

	s.reboot(ids)

	got, err := s.client.GetSandbox(ctx, suspended)
	if err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("suspended sandbox after reboot: %+v, %v", got, err)
	}
	got, err = s.client.WaitSandbox(ctx, running, apiv1.StateRunning, time.Minute)
	if err != nil || got.Recovered == "" {
		t.Fatalf("running sandbox after reboot: %+v, %v; want running and flagged recovered", got, err)
	}
	for _, id := range ids {
		r, err := s.client.ReadFile(ctx, id, "/home/user/kept.txt")
		if err != nil {
			t.Fatalf("%s after reboot: %v", id, err)
		}
		data := make([]byte, 16)
		n, _ := r.Read(data)
		r.Close()
		if string(data[:n]) != "on disk" {
			t.Fatalf("%s lost its file: %q", id, data[:n])
		}
	}
	for _, id := range ids {
		if err := s.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
