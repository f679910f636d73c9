package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// vmTemplate is a minimal-based template built for both runtimes, gVisor
// its default.
const vmTemplate = "vm-minimal"

// A sandbox of a template built for both runtimes, created on microvm,
// runs in a QEMU guest (TCG here) and does what a gVisor sandbox does
// through the API: exec, files, a session re-attached by offset, pause
// and resume, suspend and resume with its memory, a snapshot restored,
// three branches diverging with the counter going on in each; deleted,
// it leaves no QEMU, cgroup, network slot or volume.
func TestMicroVMLifecycle(t *testing.T) {
	requireServer(t)
	if env.noMicroVM != "" {
		t.Skip(env.noMicroVM)
	}
	ctx := testContext(t)
	requireVMTemplate(t)

	begin := time.Now()
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: vmTemplate, Runtime: "microvm", MemoryMB: 128, VCPUs: 1})
	t.Logf("create on microvm to running: %s", time.Since(begin).Round(time.Millisecond))
	// The harness's server runs its guests under TCG (--accel tcg).
	if sb.Runtime != "microvm" || sb.Isolation != "microvm-tcg" {
		t.Fatalf("runtime %q, isolation %q", sb.Runtime, sb.Isolation)
	}
	// A kernel of its own: the guest's, not the host's.
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if guest := strings.TrimSpace(execOK(t, sb.ID, "uname -r")); guest == strings.TrimSpace(string(host)) {
		t.Fatalf("the guest runs the host's kernel %s", guest)
	}
	begin = time.Now()
	if out := execOK(t, sb.ID, "echo hello from $(hostname)"); out != "hello from "+sb.ID+"\n" {
		t.Fatalf("exec said %q", out)
	}
	t.Logf("exec round trip: %s", time.Since(begin).Round(time.Millisecond))
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/note.txt", strings.NewReader("kept on the guest's disk")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("read back %q", got)
	}
	reattachByOffset(t, sb.ID)

	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	if _, err := env.client.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	before = requireCounting(t, sb.ID, before, pid)

	begin = time.Now()
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("suspend: %s", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	if got, err := env.client.Resume(ctx, sb.ID); err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("resume after suspend: %+v, %v", got, err)
	}
	t.Logf("resume from suspend: %s", time.Since(begin).Round(time.Millisecond))
	before = requireCounting(t, sb.ID, before, pid)
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("after suspend and resume: %q", got)
	}

	// A snapshot, a change, and the rollback to it.
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "echo changed > /home/user/note.txt")
	begin = time.Now()
	if got, err := env.client.Restore(ctx, sb.ID, "s1"); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("restore: %+v, %v", got, err)
	}
	t.Logf("restore of a snapshot: %s", time.Since(begin).Round(time.Millisecond))
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("after the rollback: %q", got)
	}
	before = count(t, sb.ID)

	// Three branches: each its own guest, going on from the same memory.
	begin = time.Now()
	branches, err := env.client.Branch(ctx, sb.ID, 3)
	if err != nil || len(branches) != 3 {
		t.Fatalf("branch: %d, %v", len(branches), err)
	}
	t.Logf("branch x3: %s", time.Since(begin).Round(time.Millisecond))
	for _, b := range branches {
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), b.ID) })
		if got, err := env.client.WaitSandbox(ctx, b.ID, apiv1.StateRunning, 2*time.Minute); err != nil || got.Runtime != "microvm" || got.Isolation != sb.Isolation {
			t.Fatalf("branch %s: %+v, %v", b.ID, got, err)
		}
	}
	for _, b := range branches {
		requireCounting(t, b.ID, before, pid)
		execOK(t, b.ID, "echo "+b.ID+" > /home/user/mine.txt")
	}
	for _, b := range append(branches, *sb) {
		want := b.ID
		if b.ID == sb.ID {
			want = "none"
		}
		if got := strings.TrimSpace(execOK(t, b.ID, "cat /home/user/mine.txt 2>/dev/null || echo none")); got != want {
			t.Fatalf("%s sees mine.txt %q, want %q", b.ID, got, want)
		}
	}

	// Deleted, a guest leaves nothing behind.
	for _, b := range append(branches, *sb) {
		if err := env.client.DeleteSandbox(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		requireNothingLeft(t, b.ID)
	}
}

// requireVMTemplate builds vmTemplate unless it is there.
func requireVMTemplate(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	if _, err := env.client.GetTemplate(ctx, vmTemplate); err != nil {
		if _, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: vmTemplate, Recipe: "from: minimal\nruntime: [gvisor, microvm]\n"}); err != nil {
			t.Fatalf("create template: %v", err)
		}
	}
	tpl := waitTemplate(t, vmTemplate)
	if strings.Join(tpl.Runtimes, ",") != "gvisor,microvm" || tpl.DefaultRuntime != "gvisor" {
		t.Fatalf("template runtimes %v, default %q", tpl.Runtimes, tpl.DefaultRuntime)
	}
}

// Across a restart of the server: a microVM sandbox that idleness
// suspended stays suspended and resumes afterwards with its memory (the
// counter goes on) and files; a running one is adopted, the same QEMU
// and nothing started twice, and goes on serving and taking its rolling
// snapshots. Both leave nothing once deleted.
func TestMicroVMServerRestart(t *testing.T) {
	requireServer(t)
	if env.noMicroVM != "" {
		t.Skip(env.noMicroVM)
	}
	requireVMTemplate(t)
	ctx := testContext(t)
	began := time.Now()
	// One after the other: emulated guests booting side by side on a
	// loaded host miss the agent's start bound.
	// The idle one last, so that it does not go idle while the other
	// boots.
	var ids [2]string
	for i, req := range []apiv1.CreateSandboxRequest{
		{IdleSuspendS: -1, SnapshotIntervalS: 60, SnapshotRetentionS: 3600},
		{IdleSuspendS: 5},
	} {
		req.Template, req.Runtime, req.MemoryMB, req.VCPUs = vmTemplate, "microvm", 128, 1
		sb, err := env.client.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatalf("create sandbox: %v", err)
		}
		ids[i] = sb.ID
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
		if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
	}
	running, idle := ids[0], ids[1]
	created := time.Now()
	idlePID, runningPID := startCounter(t, idle), startCounter(t, running)
	execOK(t, idle, "echo idle > /home/user/mark")
	execOK(t, running, "echo running > /home/user/mark")
	idleBefore := count(t, idle)
	if got, err := env.client.WaitSandbox(ctx, idle, apiv1.StateSuspended, time.Minute); err != nil || got.Reason != "idle" {
		t.Fatalf("idle microvm sandbox: %+v, %v; want suspended for idleness", got, err)
	}
	if left := qemuPIDs(idle); len(left) != 0 {
		t.Fatalf("a suspended guest keeps QEMU %v running", left)
	}
	runningBefore := count(t, running)
	qemu := qemuPIDs(running)
	if len(qemu) != 1 {
		t.Fatalf("running guest: QEMU processes %v", qemu)
	}

	restarted := time.Now()
	restartServer(t)
	t.Logf("server restart: %s", time.Since(restarted).Round(time.Millisecond))
	ctx = testContext(t) // the old client's server is gone

	// The running guest was adopted: its QEMU, its processes.
	if got, err := env.client.GetSandbox(ctx, running); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("running sandbox after the restart: %+v, %v", got, err)
	}
	requireCounting(t, running, runningBefore, runningPID)
	if now := qemuPIDs(running); len(now) != 1 || now[0] != qemu[0] {
		t.Fatalf("adopted guest: QEMU %v after the restart, %v before", now, qemu)
	}
	if got := strings.TrimSpace(execOK(t, running, "cat /home/user/mark")); got != "running" {
		t.Fatalf("adopted guest's file: %q", got)
	}

	// The suspended one stayed so, and comes back with its memory.
	if got, err := env.client.GetSandbox(ctx, idle); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("suspended sandbox after the restart: %+v, %v", got, err)
	}
	resumed := time.Now()
	if got, err := env.client.Resume(ctx, idle); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("resume after the restart: %+v, %v", got, err)
	}
	t.Logf("resume after the restart: %s", time.Since(resumed).Round(time.Millisecond))
	requireCounting(t, idle, idleBefore, idlePID)
	if got := strings.TrimSpace(execOK(t, idle, "cat /home/user/mark")); got != "idle" {
		t.Fatalf("resumed guest's file: %q", got)
	}

	// The adopted guest's rolling snapshots go on (the first one
	// interval after its start).
	for {
		list, err := env.client.ListSnapshots(ctx, running)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) >= 1 && strings.HasPrefix(list[0].Name, "auto-") {
			break
		}
		if time.Since(created) > 150*time.Second {
			t.Fatalf("no rolling snapshot of the adopted guest: %+v", list)
		}
		time.Sleep(500 * time.Millisecond)
	}
	requireCounting(t, running, runningBefore, runningPID)

	for _, id := range ids {
		if err := env.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		requireNothingLeft(t, id)
	}
	t.Logf("whole test: %s", time.Since(began).Round(time.Second))
}

// qemuPIDs lists the host's QEMU processes of a sandbox.
func qemuPIDs(id string) []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "qemu") && strings.Contains(string(b), id) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// reattachByOffset runs a session that prints numbered lines and reads
// it through several short attaches, each from the offset the last one
// reached: every line arrives once, in order.
func reattachByOffset(t *testing.T, id string) {
	t.Helper()
	ctx := testContext(t)
	const lines = 200
	sess, err := env.client.CreateSession(ctx, id, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); if [ $((i %% 50)) = 0 ]; then sleep 0.2; fi; done`, lines)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readByReattaching(t, ctx, id, sess.ID, 3)
	var want strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got != want.String() {
		t.Fatalf("re-attached output differs: %d bytes, want %d", len(got), want.Len())
	}
}

// requireNothingLeft checks that a deleted sandbox left no QEMU process,
// cgroup, network slot or root volume on the host.
func requireNothingLeft(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := vmLeftovers(id)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted sandbox %s left %s", id, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func vmLeftovers(id string) []string {
	var left []string
	for _, pid := range qemuPIDs(id) {
		left = append(left, "a QEMU process ("+pid+")")
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/space", id),
		filepath.Join("/sys/fs/cgroup/memory/space", id),
		filepath.Join(env.dataDir, "netns", "space-"+id),
		filepath.Join(env.dataDir, "volumes", "sandboxes", id),
		filepath.Join(env.dataDir, "microvm", id),
	} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}
