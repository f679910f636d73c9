package e2e

import (
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func TestTimeoutEndsSandboxUnlessExtended(t *testing.T) {
	short := newSandbox(t, apiv1.CreateSandboxRequest{TimeoutS: 2, Metadata: map[string]string{"test": "timeout"}})
	extended := newSandbox(t, apiv1.CreateSandboxRequest{TimeoutS: 2, Metadata: map[string]string{"test": "timeout"}})
	ctx := testContext(t)
	if _, err := env.client.SetTimeout(ctx, extended.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	stopped, err := env.client.WaitSandbox(ctx, short.ID, apiv1.StateStopped, 30*time.Second)
	if err != nil {
		t.Fatalf("sandbox with timeout_s 2 did not stop: %v", err)
	}
	if stopped.Reason != "timeout" {
		t.Errorf("reason %q, want timeout", stopped.Reason)
	}
	if sb, err := env.client.GetSandbox(ctx, extended.ID); err != nil || sb.State != apiv1.StateRunning {
		t.Fatalf("extended sandbox = %+v, %v; want running", sb, err)
	}
	execOK(t, extended.ID, "true")
	// The stopped sandbox holds nothing on the node any more.
	if _, err := env.client.Exec(ctx, short.ID, apiv1.ExecRequest{Cmd: []string{"true"}}); !client.IsConflict(err) {
		t.Errorf("exec on a timed-out sandbox: %v, want 409", err)
	}
	list, err := env.client.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"test": "timeout"}, State: apiv1.StateRunning})
	if err != nil || len(list) != 1 || list[0].ID != extended.ID {
		t.Errorf("filtered list = %+v, %v; want only the extended sandbox", list, err)
	}
}

func TestSandboxesSurviveClientDisconnectAndServerRestart(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	if _, err := env.client.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	restartServer(t)
	got, err := env.client.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	if out := execOK(t, sb.ID, "ps -o args"); !contains(out, "sleep 1000") {
		t.Fatalf("process did not survive the server restart:\n%s", out)
	}
}
