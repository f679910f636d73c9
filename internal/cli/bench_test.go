package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/bench"
)

// The table shows the floors beside their figures, attach's rates, and
// the ratios to the floors.
func TestBenchTableShowsFloors(t *testing.T) {
	floor := 900.0
	res := &bench.Result{
		ExecRTT:      &bench.Summary{N: 3, MinMS: 9, P50MS: 10, P95MS: 11, P99MS: 11},
		FloorExecRTT: &bench.Summary{N: 3, MinMS: 0.9, P50MS: 1, P95MS: 1.1, P99MS: 1.1},
		AttachStream: &bench.AttachStream{MiB: 256, Runs: 3, MBPerS: 150.5, DroppedBytes: 42, FloorMBPerS: &floor},
		Ratios:       map[string]float64{"exec_rtt/floor_exec_rtt": 10, "attach_stream/floor_attach_stream": 5.98},
	}
	var out bytes.Buffer
	saved := stdout
	stdout = &out
	t.Cleanup(func() { stdout = saved })
	if err := printBenchTable(res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"floor_exec_rtt", "attach stream (256 MiB, median of 3): 150.5 MB/s received (42 bytes dropped); floor inside the sandbox 900.0 MB/s",
		"exec_rtt/floor_exec_rtt = 10.00", "attach_stream/floor_attach_stream = 5.98",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBenchRefusesNoAttachBytes(t *testing.T) {
	code, _, errOut := runMain(t, "", "bench", "--attach-mib", "0")
	if code != 2 || !strings.Contains(errOut, "--attach-mib must be at least 1") {
		t.Errorf("bench --attach-mib 0: code %d, stderr %q", code, errOut)
	}
}

// A churn figure that is not to be trusted is printed as such, with why,
// never as the cycles' cost; one left out as impossible is not printed.
func TestBenchTableMarksUntrustworthyChurn(t *testing.T) {
	read := 12.5
	for _, c := range []struct {
		churn     bench.Churn
		want, not []string
	}{
		{bench.Churn{Cycles: 100, KernelCPUMSPerCycle: &read, CleanerCPUMSPerCycle: &read, Settled: true, QuietBefore: true, Trustworthy: true, SettleS: 4},
			[]string{"100 create → delete cycles cost the kernel 12.5 ms of CPU each", "quiet 4.0 s after"}, []string{"NOT TRUSTWORTHY"}},
		{bench.Churn{Cycles: 100, KernelCPUMSPerCycle: &read, CleanerCPUMSPerCycle: &read, QuietBefore: true, Doubt: "still busy 1m0s after the last delete"},
			[]string{"NOT TRUSTWORTHY: still busy 1m0s after the last delete", "read 12.5 ms"}, []string{"cost the kernel"}},
		{bench.Churn{Cycles: 100, Settled: true, QuietBefore: true, Doubt: "which is impossible"},
			[]string{"NOT TRUSTWORTHY: which is impossible"}, []string{"cost the kernel", "ms of CPU"}},
	} {
		var out bytes.Buffer
		saved := stdout
		stdout = &out
		err := printBenchTable(&bench.Result{Churn: &c.churn})
		stdout = saved
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		}
		for _, not := range c.not {
			if strings.Contains(out.String(), not) {
				t.Errorf("table has %q:\n%s", not, out.String())
			}
		}
	}
}

func TestBenchRefusesNoChurnQuietWait(t *testing.T) {
	code, _, errOut := runMain(t, "", "bench", "--churn-quiet-wait", "0s")
	if code != 2 || !strings.Contains(errOut, "--churn-quiet-wait positive") {
		t.Errorf("bench --churn-quiet-wait 0s: code %d, stderr %q", code, errOut)
	}
}
