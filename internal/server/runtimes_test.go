package server

import (
	"strings"
	"testing"
)

// --runtimes and --accel fail at start when the server cannot honour
// them, saying why; gvisor (the default) and every --accel pass.
func TestCheckRuntimes(t *testing.T) {
	for _, accel := range []string{"", "auto", "kvm", "tcg"} {
		if err := checkRuntimes([]string{"gvisor"}, accel); err != nil {
			t.Errorf("gvisor with --accel %q: %v", accel, err)
		}
	}
	for _, tc := range []struct {
		runtimes []string
		accel    string
		want     string
	}{
		{[]string{"gvisor", "microvm"}, "auto", "the microvm runtime is not available in this build yet"},
		{[]string{"microvm"}, "tcg", "gvisor is required"},
		{[]string{"gvisor", "qemu"}, "auto", `unknown runtime "qemu" (want one of gvisor, microvm)`},
		{nil, "auto", "name at least one runtime"},
		{[]string{"gvisor"}, "hvf", `--accel "hvf": want auto, kvm or tcg`},
	} {
		err := checkRuntimes(tc.runtimes, tc.accel)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--runtimes %v --accel %s: %v; want an error saying %q", tc.runtimes, tc.accel, err, tc.want)
		}
	}
}
