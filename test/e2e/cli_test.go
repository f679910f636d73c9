package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// space runs the CLI binary against the test server.
func space(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.binDir, "space"), args...)
	cmd.Env = append(os.Environ(), "SPACE_URL="+env.srv.URL, "SPACE_API_KEY="+env.srv.AdminKey)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("space %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

func TestCLI(t *testing.T) {
	requireServer(t)
	out, errOut, code := space(t, "", "sandbox", "create", "--template", "minimal", "--wait")
	if code != 0 {
		t.Fatalf("sandbox create: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	defer space(t, "", "sandbox", "rm", id)

	out, errOut, code = space(t, "", "exec", id, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if code != 3 || out != "to-stdout\n" || errOut != "to-stderr\n" {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = space(t, "piped input\n", "exec", id, "--", "cat")
	if code != 0 || out != "piped input\n" {
		t.Fatalf("exec with stdin: exit %d, stdout %q", code, out)
	}

	local := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(local, []byte("copied\x00bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := space(t, "", "cp", local, id+":/tmp/in.txt"); code != 0 {
		t.Fatalf("cp in: %s", errOut)
	}
	out, errOut, code = space(t, "", "cp", id+":/tmp/in.txt", "-")
	if code != 0 || out != "copied\x00bytes" {
		t.Fatalf("cp out: exit %d %q %s", code, out, errOut)
	}

	out, _, code = space(t, "", "sandbox", "ls")
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("sandbox ls does not list %s:\n%s", id, out)
	}
	// Lifecycle commands.
	for _, args := range [][]string{
		{"pause", id}, {"resume", id}, {"suspend", id}, {"resume", id},
		{"snapshot", "create", id, "cli-snap"}, {"snapshot", "ls", id}, {"restore", id, "cli-snap"},
		{"snapshot", "rm", id, "cli-snap"}, {"events", id},
	} {
		if out, errOut, code := space(t, "", args...); code != 0 {
			t.Fatalf("space %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	out, errOut, code = space(t, "", "branch", id, "--count", "2")
	if code != 0 || len(strings.Fields(out)) < 2 {
		t.Fatalf("space branch: exit %d\n%s%s", code, out, errOut)
	}
	for _, f := range strings.Fields(out) {
		if len(f) == 20 && f != id {
			defer space(t, "", "sandbox", "rm", f)
		}
	}
	// Egress policy, shown and replaced.
	out, errOut, code = space(t, "", "network", id, "--no-internet", "--allow", "example.com", "--deny", "192.0.2.0/24")
	if code != 0 || !strings.Contains(out, `"allow_internet": false`) || !strings.Contains(out, "example.com") {
		t.Fatalf("space network: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = space(t, "", "network", id, "--allow", "not a rule")
	if code != 1 || !strings.Contains(errOut, "not a rule") {
		t.Fatalf("space network with a bad rule: exit %d, %q; want 1 and a sentence", code, errOut)
	}
	_, errOut, code = space(t, "", "pause", "nosuchsandbox0000000")
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("pause of an unknown sandbox: exit %d, %q", code, errOut)
	}

	_, errOut, code = space(t, "", "exec", "nosuchsandbox0000000", "--", "true")
	if code != 1 || !strings.Contains(errOut, "not found") || strings.Contains(errOut, "goroutine") {
		t.Fatalf("exec on an unknown sandbox: exit %d, stderr %q; want 1 and a sentence", code, errOut)
	}
	if _, errOut, code := space(t, "", "sandbox", "rm", id); code != 0 {
		t.Fatalf("sandbox rm: %s", errOut)
	}
}
