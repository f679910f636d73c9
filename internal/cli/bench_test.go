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
