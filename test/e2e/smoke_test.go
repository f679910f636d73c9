package e2e

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// smokeTests are the end-to-end tests of the quick tier
// (./scripts/test.sh --quick): every other test that needs the server is
// skipped there by requireServer (testtier.Full) and runs in the full
// tier.
var smokeTests = map[string]bool{"TestSmoke": true}

// requireFullTier skips t in the quick tier unless it is a smoke test.
func requireFullTier(t *testing.T) {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if !smokeTests[top] {
		testtier.Full(t, "an end-to-end test outside the smoke set (test/e2e/smoke_test.go)")
	}
}

// TestSmoke is the quick tier's end-to-end test: one gVisor sandbox is
// created, runs a command, takes and gives back a file, is suspended and
// resumed with its process and file kept, and is deleted without a trace.
func TestSmoke(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	if sb.Isolation != "" && sb.Isolation != "gvisor" {
		t.Fatalf("the smoke sandbox runs on %q, want gvisor", sb.Isolation)
	}

	res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}})
	if err != nil || res.ExitCode != 7 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("exec = %+v, %v; want out, err and exit 7", res, err)
	}

	const body = "smoke: written through the files API\n"
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/smoke.txt", strings.NewReader(body)); err != nil {
		t.Fatalf("write file: %v", err)
	}
	if got := execOK(t, sb.ID, "cat /home/user/smoke.txt"); got != body {
		t.Fatalf("the sandbox reads %q, want %q", got, body)
	}
	execOK(t, sb.ID, "echo 'written inside' > /home/user/inside.txt")
	r, err := env.client.ReadFile(ctx, sb.ID, "/home/user/inside.txt")
	if err != nil {
		t.Fatalf("read file: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "written inside\n" {
		t.Fatalf("read file = %q, %v", got, err)
	}

	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateSuspended, time.Minute); err != nil {
		t.Fatalf("wait for suspended: %v", err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatalf("wait for running: %v", err)
	}
	requireCounting(t, sb.ID, before, pid)
	if got := execOK(t, sb.ID, "cat /home/user/smoke.txt"); got != body {
		t.Fatalf("after the resume the file holds %q, want %q", got, body)
	}

	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	gone, err := env.client.GetSandbox(ctx, sb.ID)
	if err == nil && gone.State != apiv1.StateStopped {
		t.Fatalf("after its delete the sandbox is %s", gone.State)
	}
	if err != nil && !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	waitNoRuntime(t, env.dataDir, sb.ID)
}

// waitNoRuntime waits until no sandbox process of id runs under the
// data directory dir.
func waitNoRuntime(t *testing.T, dir, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		for _, p := range runtimesUnder(dir) {
			if strings.Contains(p, id) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still runs 30 s after its delete: %v", id, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
