package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// counterScript counts in a shell variable (process memory) and mirrors the
// value to a file, so a test can see whether the process kept its memory.
// The file is replaced by a rename so a reader never sees it half written.
const counterScript = `i=0; while true; do i=$((i+1)); echo $i > /home/user/.count; mv /home/user/.count /home/user/count; sleep 0.05; done`

// startCounter starts the counter and waits until it has counted a little.
func startCounter(t *testing.T, id string) (pid uint32) {
	t.Helper()
	sess, err := env.client.CreateSession(testContext(t), id, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", counterScript}, Tag: "counter",
	})
	if err != nil {
		t.Fatal(err)
	}
	for count(t, id) < 3 {
		time.Sleep(20 * time.Millisecond)
	}
	return sess.PID
}

// count reads the counter's current value.
func count(t *testing.T, id string) int {
	t.Helper()
	out := strings.TrimSpace(execOK(t, id, "cat /home/user/count 2>/dev/null || echo 0"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter file holds %q", out)
	}
	return n
}

// requireCounting checks that the counter process kept its memory (it goes
// on from at least before, it did not start again at 1) and still runs.
func requireCounting(t *testing.T, id string, before int, pid uint32) int {
	t.Helper()
	after := count(t, id)
	if after < before {
		t.Fatalf("counter went back from %d to %d: the process lost its memory", before, after)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(t, id) <= after {
		if time.Now().After(deadline) {
			ps, _ := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"ps", "-o", "pid,stat,args"}})
			t.Fatalf("counter stuck at %d; processes: %+v", after, ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := execOK(t, id, "ps -o pid,args"); !strings.Contains(out, strconv.Itoa(int(pid))+" ") {
		t.Fatalf("counter pid %d is gone:\n%s", pid, out)
	}
	return after
}

func TestPauseResumeKeepsProcesses(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	paused, err := env.client.Pause(ctx, sb.ID)
	if err != nil || paused.State != apiv1.StatePaused {
		t.Fatalf("pause = %+v, %v", paused, err)
	}
	if _, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"true"}}); !client.IsConflict(err) {
		t.Fatalf("exec on a paused sandbox: %v, want 409", err)
	}
	if _, err := env.client.Pause(ctx, sb.ID); !client.IsConflict(err) {
		t.Fatalf("pause of a paused sandbox: %v, want 409", err)
	}
	if resumed, err := env.client.Resume(ctx, sb.ID); err != nil || resumed.State != apiv1.StateRunning {
		t.Fatalf("resume = %+v, %v", resumed, err)
	}
	requireCounting(t, sb.ID, before, pid)
	if _, err := env.client.Resume(ctx, sb.ID); !client.IsConflict(err) {
		t.Fatalf("resume of a running sandbox: %v, want 409", err)
	}
}

// runtimeProcesses counts host processes that belong to a sandbox's runtime.
func runtimeProcesses(id string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			n++
		}
	}
	return n
}

func TestSuspendResumeKeepsMemoryFilesAndSessions(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{MemoryMB: 256})
	ctx := testContext(t)
	pid := startCounter(t, sb.ID)
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/before.txt", strings.NewReader("written before suspend")); err != nil {
		t.Fatal(err)
	}
	// A session whose output spans the suspend.
	ticker, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 60 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := count(t, sb.ID)
	suspended, err := env.client.Suspend(ctx, sb.ID)
	if err != nil || suspended.State != apiv1.StateSuspended || suspended.SuspendedAt == nil {
		t.Fatalf("suspend = %+v, %v", suspended, err)
	}
	if n := runtimeProcesses(sb.ID); n != 0 {
		t.Fatalf("%d runtime processes still run for a suspended sandbox", n)
	}
	if _, err := env.client.Suspend(ctx, sb.ID); !client.IsConflict(err) {
		t.Fatalf("suspend of a suspended sandbox: %v, want 409", err)
	}
	resumed, err := env.client.Resume(ctx, sb.ID)
	if err != nil || resumed.State != apiv1.StateRunning || resumed.AccessToken != sb.AccessToken {
		t.Fatalf("resume = %+v, %v", resumed, err)
	}
	requireCounting(t, sb.ID, before, pid)
	if got := readAll(t, sb.ID, "/home/user/before.txt"); string(got) != "written before suspend" {
		t.Fatalf("file after resume: %q", got)
	}
	out, code := collect(t, sb.ID, ticker.ID)
	if code != 0 || strings.Count(out, "tick ") != 60 || !strings.Contains(out, "tick 59\n") {
		t.Fatalf("session across suspend: exit %d, %d ticks:\n%s", code, strings.Count(out, "tick "), out)
	}
}

func TestSuspendedSandboxSurvivesServerRestartAndAutoResumes(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Metadata: map[string]string{"who": "restart"}})
	ctx := testContext(t)
	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	restartServer(t)
	got, err := env.client.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != apiv1.StateSuspended || got.Metadata["who"] != "restart" || got.AccessToken != sb.AccessToken {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	// Any call addressed to it resumes it.
	requireCounting(t, sb.ID, before, pid)
	if got, _ := env.client.GetSandbox(ctx, sb.ID); got.State != apiv1.StateRunning {
		t.Fatalf("state after auto-resume: %s", got.State)
	}
}

func TestAutoResumeCanBeDisabled(t *testing.T) {
	off := false
	sb := newSandbox(t, apiv1.CreateSandboxRequest{AutoResume: &off})
	ctx := testContext(t)
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"true"}}); !client.IsConflict(err) {
		t.Fatalf("exec on a suspended sandbox without auto-resume: %v, want 409", err)
	}
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "x"); !client.IsConflict(err) {
		t.Fatalf("snapshot of a suspended sandbox: %v, want 409", err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "true")
}

func TestBranchFiveWays(t *testing.T) {
	src := newSandbox(t, apiv1.CreateSandboxRequest{Env: map[string]string{"ORIGIN": "source"}})
	ctx := testContext(t)
	pid := startCounter(t, src.ID)
	if _, err := env.client.WriteFile(ctx, src.ID, "/home/user/shared.txt", strings.NewReader("from the source")); err != nil {
		t.Fatal(err)
	}
	before := count(t, src.ID)
	branches, err := env.client.Branch(ctx, src.ID, 5)
	if err != nil || len(branches) != 5 {
		t.Fatalf("branch = %d sandboxes, %v", len(branches), err)
	}
	ids := map[string]bool{src.ID: true}
	tokens := map[string]bool{src.AccessToken: true}
	for _, b := range branches {
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), b.ID) })
		if ids[b.ID] || tokens[b.AccessToken] || b.BranchOf != src.ID {
			t.Fatalf("branch %+v does not have its own identity", b)
		}
		ids[b.ID], tokens[b.AccessToken] = true, true
		if _, err := env.client.WaitSandbox(ctx, b.ID, apiv1.StateRunning, time.Minute); err != nil {
			t.Fatalf("branch %s: %v", b.ID, err)
		}
	}
	for i, b := range branches {
		// Each continues from the captured value with the same process...
		requireCounting(t, b.ID, before, pid)
		if got := readAll(t, b.ID, "/home/user/shared.txt"); string(got) != "from the source" {
			t.Fatalf("branch %d file: %q", i, got)
		}
		// ...knows who it is now...
		var identity map[string]string
		if err := json.Unmarshal(readAll(t, b.ID, "/run/space/identity.json"), &identity); err != nil ||
			identity["sandbox_id"] != b.ID || identity["branch_of"] != src.ID {
			t.Fatalf("branch %d identity file = %v, %v", i, identity, err)
		}
		if out := execOK(t, b.ID, `hostname; echo "$SPACE_SANDBOX_ID $ORIGIN"`); out != b.ID+"\n"+b.ID+" source\n" {
			t.Fatalf("branch %d hostname/env = %q", i, out)
		}
		// ...and diverges.
		if _, err := env.client.WriteFile(ctx, b.ID, "/home/user/mine.txt", strings.NewReader(b.ID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range append(branches, *src) {
		out := execOK(t, b.ID, "cat /home/user/mine.txt 2>/dev/null || echo none")
		want := b.ID + "\n"
		if b.ID == src.ID {
			want = "none\n"
		}
		if out != want && out != strings.TrimSuffix(want, "\n") {
			t.Fatalf("%s sees mine.txt = %q, want %q", b.ID, out, want)
		}
	}
	// The source kept running throughout.
	requireCounting(t, src.ID, before, pid)
}

func TestSnapshotRestoreAndSingleFileRecovery(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/precious.txt", strings.NewReader("version 1")); err != nil {
		t.Fatal(err)
	}
	snap, err := env.client.CreateSnapshot(ctx, sb.ID, "s1")
	if err != nil || snap.Name != "s1" || snap.SandboxID != sb.ID {
		t.Fatalf("snapshot = %+v, %v", snap, err)
	}
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "s1"); !client.IsConflict(err) {
		t.Fatalf("second snapshot named s1: %v, want 409", err)
	}
	if got, _ := env.client.GetSandbox(ctx, sb.ID); got.State != apiv1.StateRunning {
		t.Fatalf("state after snapshot: %s", got.State)
	}
	// A mistake: the file is overwritten, then deleted.
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/precious.txt", strings.NewReader("version 2")); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "rm /home/user/precious.txt")

	// One file back from the snapshot, without a rollback.
	r, err := env.client.ReadFileFromSnapshot(ctx, sb.ID, "/home/user/precious.txt", "s1")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64)
	n, _ := r.Read(data)
	r.Close()
	if string(data[:n]) != "version 1" {
		t.Fatalf("file from snapshot = %q", data[:n])
	}
	// A symlink planted in the sandbox must not lead a snapshot read to
	// the host's files.
	execOK(t, sb.ID, "ln -s /../../../../../../etc/passwd /home/user/evil")
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "with-link"); err != nil {
		t.Fatal(err)
	}
	if r, err := env.client.ReadFileFromSnapshot(ctx, sb.ID, "/home/user/evil", "with-link"); err == nil {
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != string(readAll(t, sb.ID, "/etc/passwd")) {
			t.Fatalf("a symlink in a snapshot read a file that is not the sandbox's own:\n%s", got)
		}
	}
	if err := env.client.DeleteSnapshot(ctx, sb.ID, "with-link"); err != nil {
		t.Fatal(err)
	}

	// Roll the whole sandbox back.
	restored, err := env.client.Restore(ctx, sb.ID, "s1")
	if err != nil || restored.State != apiv1.StateRunning || restored.ID != sb.ID || restored.AccessToken != sb.AccessToken {
		t.Fatalf("restore = %+v, %v", restored, err)
	}
	if got := readAll(t, sb.ID, "/home/user/precious.txt"); string(got) != "version 1" {
		t.Fatalf("after restore: %q", got)
	}

	// A new sandbox from the snapshot.
	fresh, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: sb.ID + "/s1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), fresh.ID) })
	if _, err := env.client.WaitSandbox(ctx, fresh.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fresh.ID, "/home/user/precious.txt"); string(got) != "version 1" {
		t.Fatalf("sandbox from snapshot: %q", got)
	}

	list, err := env.client.ListSnapshots(ctx, sb.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots = %+v, %v", list, err)
	}
	if err := env.client.DeleteSnapshot(ctx, sb.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Restore(ctx, sb.ID, "s1"); !client.IsNotFound(err) {
		t.Fatalf("restore of a deleted snapshot: %v, want 404", err)
	}
}

func TestIdleSuspendAndTimeoutSuspend(t *testing.T) {
	idle := newSandbox(t, apiv1.CreateSandboxRequest{IdleSuspendS: 2})
	timed := newSandbox(t, apiv1.CreateSandboxRequest{TimeoutS: 2, OnTimeout: "suspend", IdleSuspendS: -1})
	ctx := testContext(t)
	got, err := env.client.WaitSandbox(ctx, idle.ID, apiv1.StateSuspended, 30*time.Second)
	if err != nil || got.Reason != "idle" {
		t.Fatalf("idle sandbox: %+v, %v; want suspended for idleness", got, err)
	}
	got, err = env.client.WaitSandbox(ctx, timed.ID, apiv1.StateSuspended, 30*time.Second)
	if err != nil || got.Reason != "timeout" {
		t.Fatalf("timed-out sandbox with on_timeout suspend: %+v, %v", got, err)
	}
	// Not deleted: it comes back on the next call.
	execOK(t, idle.ID, "true")
	events, err := env.client.Events(ctx, idle.ID)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, e := range events {
		if e.Type == "state" {
			path = append(path, e.To)
		}
	}
	if want := "starting running suspending suspended resuming running"; strings.Join(path, " ") != want {
		t.Fatalf("recorded transitions %v, want %s", path, want)
	}
}

// e2eSnapshotInterval is the harness server's floor of
// snapshot_interval_s (--min-snapshot-interval), in seconds.
const e2eSnapshotInterval = 5

func TestRollingSnapshots(t *testing.T) {
	inParallelGroup(t)
	// The harness's floor of snapshot_interval_s; the first rolling
	// snapshot comes one interval after the start.
	sb := newSandbox(t, apiv1.CreateSandboxRequest{SnapshotIntervalS: e2eSnapshotInterval, SnapshotRetentionS: 3600})
	ctx := testContext(t)
	deadline := time.Now().Add(100 * time.Second)
	for {
		list, err := env.client.ListSnapshots(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) >= 1 && strings.HasPrefix(list[0].Name, "auto-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rolling snapshots: %+v", list)
		}
		time.Sleep(200 * time.Millisecond)
	}
	execOK(t, sb.ID, "true")
}
