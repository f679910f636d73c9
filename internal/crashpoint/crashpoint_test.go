package crashpoint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// The helper process hits "other" and then "armed"; the test checks which
// one killed it.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("CRASHPOINT_HELPER") == "" {
		t.Skip("run by TestHitKillsOnlyAtTheArmedPoint")
	}
	Hit("other")
	os.Stdout.WriteString("passed other\n")
	Hit("armed")
	os.Stdout.WriteString("passed armed\n")
}

func TestHitKillsOnlyAtTheArmedPoint(t *testing.T) {
	armed := filepath.Join(t.TempDir(), "crash-at")
	if err := os.WriteFile(armed, []byte("armed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "CRASHPOINT_HELPER=1", "SPACE_TEST_CRASH_AT="+armed)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want SIGKILL; output %q", err, out)
	}
	if string(out) != "passed other\n" {
		t.Fatalf("helper printed %q; want it killed at the armed point only", out)
	}
}

func TestHitDoesNothingUnarmed(t *testing.T) {
	if file != "" {
		t.Skip("SPACE_TEST_CRASH_AT is set for this process")
	}
	Hit("anything") // must return
}
