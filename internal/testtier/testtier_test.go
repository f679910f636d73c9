package testtier

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHelperFull is run by TestFullSkipsOnlyInTheQuickTier in a child
// process, with and without -test.short.
func TestHelperFull(t *testing.T) {
	if os.Getenv("TESTTIER_HELPER") == "" {
		t.Skip("run by TestFullSkipsOnlyInTheQuickTier")
	}
	Full(t, "boots something slow")
	t.Log("ran past Full")
}

func TestFullSkipsOnlyInTheQuickTier(t *testing.T) {
	for _, tc := range []struct {
		short bool
		want  string
	}{
		{false, "ran past Full"},
		{true, FullOnly + "boots something slow"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFull$", "-test.v", "-test.short="+map[bool]string{true: "true", false: "false"}[tc.short])
		cmd.Env = append(os.Environ(), "TESTTIER_HELPER=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper (short=%v): %v\n%s", tc.short, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("helper (short=%v) printed no %q:\n%s", tc.short, tc.want, out)
		}
		if tc.short && strings.Contains(string(out), "ran past Full") {
			t.Errorf("the quick tier ran past Full:\n%s", out)
		}
	}
}
