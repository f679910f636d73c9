package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func TestSandboxesCannotSeeEachOther(t *testing.T) {
	a := newSandbox(t, apiv1.CreateSandboxRequest{})
	b := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	if _, err := env.client.WriteFile(ctx, a.ID, "/tmp/only-in-a", strings.NewReader("secret")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CreateSession(ctx, a.ID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "4242"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.ReadFile(ctx, b.ID, "/tmp/only-in-a"); !client.IsNotFound(err) {
		t.Fatalf("b reads a's file: %v", err)
	}
	out := execOK(t, b.ID, "ls /tmp; ps -o args; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '")
	if strings.Contains(out, "only-in-a") || strings.Contains(out, "4242") {
		t.Fatalf("b sees a's files or processes:\n%s", out)
	}
	if out := execOK(t, a.ID, "ps -o args"); !strings.Contains(out, "sleep 4242") {
		t.Fatalf("a does not see its own process:\n%s", out)
	}
}

func TestSandboxCannotSeeHost(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	marker, err := os.CreateTemp("/tmp", "space-host-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	defer os.Remove(marker.Name())
	hostProc := exec.Command("sleep", "31337")
	if err := hostProc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hostProc.Process.Kill(); _ = hostProc.Wait() }()

	out := execOK(t, sb.ID, "ls -a /tmp /; ps -o pid,args; cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/version")
	for _, leak := range []string{"space-host-marker", "31337", "space serve", "runsc"} {
		if strings.Contains(out, leak) {
			t.Errorf("sandbox sees host %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "space-agent") {
		t.Errorf("PID 1 is not the agent:\n%s", out)
	}
	// The kernel the sandbox talks to is gVisor's, not the host's.
	host, _ := os.ReadFile("/proc/version")
	if strings.Contains(out, strings.TrimSpace(string(host))) {
		t.Errorf("sandbox reads the host kernel's /proc/version")
	}
	// No host path reaches into the sandbox's view; /.space is read-only.
	res, err := env.client.Exec(context.Background(), sb.ID, apiv1.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", "echo x > /.space/bin/space-agent"}, User: "root",
	})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("the agent binary is writable from inside: %+v %v", res, err)
	}
}
