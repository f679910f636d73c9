package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// setPool sets the minimal template's warm pool and waits until it is full.
func setPool(t *testing.T, size int) { setTemplatePool(t, "minimal", size) }

// setTemplatePool sets a template's warm pool and waits until it is full.
func setTemplatePool(t *testing.T, name string, size int) {
	t.Helper()
	// A microVM pool boots its image under TCG first.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := env.client.SetTemplatePool(ctx, name, size); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		tpl, err := env.client.GetTemplate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if tpl.Pool != nil && tpl.Pool.Size == size && tpl.Pool.Ready == size {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool of %s did not fill: %+v", name, tpl.Pool)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pooled sandboxes are handed out running, each with its own identity, and
// never carry a previous tenant's state.
func TestWarmPoolClaimsAreIsolated(t *testing.T) {
	requireServer(t)
	setPool(t, 2)
	defer setPool(t, 0)
	ctx := testContext(t)
	claim := func(vars map[string]string) *apiv1.Sandbox {
		t.Helper()
		sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Env: vars})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
		if sb.State != apiv1.StateRunning {
			t.Fatalf("a pooled create answered state %s, want running", sb.State)
		}
		return sb
	}
	a := claim(map[string]string{"TENANT": "a"})
	b := claim(map[string]string{"TENANT": "b"})
	if a.ID == b.ID || a.AccessToken == b.AccessToken {
		t.Fatalf("two claims share an identity: %s/%s", a.ID, b.ID)
	}
	for _, sb := range []*apiv1.Sandbox{a, b} {
		want := sb.Env["TENANT"] + " " + sb.ID + " " + sb.ID + "\n"
		if out := execOK(t, sb.ID, `echo "$TENANT $SPACE_SANDBOX_ID $(hostname)"`); out != want {
			t.Fatalf("sandbox %s sees %q, want %q", sb.ID, out, want)
		}
	}
	if _, err := env.client.WriteFile(ctx, a.ID, "/home/user/tenant-a-secret", strings.NewReader("a's data")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CreateSession(ctx, a.ID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "7777"}}); err != nil {
		t.Fatal(err)
	}
	execOK(t, a.ID, "echo a > /tmp/tenant-a")
	if err := env.client.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// The pool refills; later tenants must not see a's files or processes.
	setPool(t, 2)
	for i := 0; i < 2; i++ {
		c := claim(nil)
		out := execOK(t, c.ID, "ls /home/user /tmp; ps -o args; echo TENANT=$TENANT")
		for _, leak := range []string{"tenant-a", "7777", "TENANT=a"} {
			if strings.Contains(out, leak) {
				t.Fatalf("a later pooled sandbox sees %q of a previous tenant:\n%s", leak, out)
			}
		}
	}
	// A request with other limits does not take a pooled sandbox.
	odd, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", MemoryMB: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer env.client.DeleteSandbox(context.Background(), odd.ID)
	if odd.State != apiv1.StateStarting {
		t.Fatalf("a create with non-default limits answered %s; want starting (not pooled)", odd.State)
	}
}
