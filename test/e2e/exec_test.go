package e2e

import (
	"strings"
	"testing"

	"github.com/space-platform/space/internal/node"
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

// The sandbox decides how much it prints; one exec must not make the
// server hold all of it.
func TestExecOutputIsBounded(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	res, err := env.client.Exec(testContext(t), sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c",
		"head -c 3145728 /dev/zero | tr '\\0' o; head -c 10 /dev/zero | tr '\\0' e >&2; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != node.MaxExecOutput || !res.OutputTruncated {
		t.Fatalf("3 MiB of stdout came back as %d bytes, output_truncated %v; want the first %d and true",
			len(res.Stdout), res.OutputTruncated, node.MaxExecOutput)
	}
	if res.Stderr != "eeeeeeeeeedone\n" || res.ExitCode != 0 {
		t.Fatalf("stderr %q, exit %d: the command must run to its end", res.Stderr, res.ExitCode)
	}
	small := execOK(t, sb.ID, "echo small")
	if small != "small\n" {
		t.Fatalf("small output = %q", small)
	}
}
