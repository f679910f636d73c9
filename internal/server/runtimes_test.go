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

// gvisor and microvm together pass checkRuntimes; the microvm runtime is
// refused on a host without QEMU or the guest kernel, naming what is
// missing and the script that installs it.
func TestMicroVMNeedsQEMUAndKernel(t *testing.T) {
	if err := checkRuntimes([]string{"gvisor", "microvm"}, "tcg"); err != nil {
		t.Fatalf("gvisor and microvm: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("SPACE_MICROVM_KERNEL", t.TempDir())
	_, _, err := microVMTools()
	for _, want := range []string{"QEMU (qemu-system-x86_64)", "the guest kernel", "scripts/install-deps.sh"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("microvm on a bare host: %v; want it to say %q", err, want)
		}
	}
}
