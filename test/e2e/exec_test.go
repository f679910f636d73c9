package e2e

import (
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestExecOutputExitCodeEnvCwdUser(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Env: map[string]string{"FROM_CREATE": "created"}})
	ctx := testContext(t)

	res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"echo", "hello", "world"}})
	if err != nil || res.Stdout != "hello world\n" || res.ExitCode != 0 {
		t.Fatalf("echo = %+v, %v", res, err)
	}

	res, err = env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo oops >&2; exit 42"}})
	if err != nil || res.ExitCode != 42 || res.Stderr != "oops\n" || res.Stdout != "" {
		t.Fatalf("exit code and stderr = %+v, %v", res, err)
	}

	res, err = env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", `echo "$FROM_CREATE $FROM_EXEC"; pwd`},
		Env: map[string]string{"FROM_EXEC": "exec"}, Cwd: "/tmp",
	})
	if err != nil || res.Stdout != "created exec\n/tmp\n" {
		t.Fatalf("env and cwd = %+v, %v", res, err)
	}

	// The template's default user is "user"; root is available on request.
	if got := strings.TrimSpace(execOK(t, sb.ID, "id -un; pwd")); got != "user\n/home/user" {
		t.Fatalf("default user and workdir = %q, want user and /home/user", got)
	}
	res, err = env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"id", "-u"}, User: "root"})
	if err != nil || res.Stdout != "0\n" {
		t.Fatalf("exec as root = %+v, %v", res, err)
	}
	res, err = env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"id", "-u"}, User: "nosuchuser"})
	if err == nil && res.ExitCode == 0 {
		t.Fatalf("exec as an unknown user succeeded: %+v", res)
	}
}

func TestExecTimeoutKillsTheCommand(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	_, err := env.client.Exec(testContext(t), sb.ID, apiv1.ExecRequest{Cmd: []string{"sleep", "30"}, TimeoutS: 1})
	if err == nil {
		t.Fatal("exec of sleep 30 with timeout_s 1 succeeded")
	}
	if out := execOK(t, sb.ID, "ps -o comm | grep -c '^sleep$' || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("sleep still running after its exec timed out (%s)", out)
	}
}
