package bench

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
)

// TestResultJSONShape pins the keys `space bench --json` promises: scripts
// and docs/performance.md read them.
func TestResultJSONShape(t *testing.T) {
	res := &Result{Notes: map[string]string{}}
	res.CreateUnpooled = &Summary{N: 20, MinMS: 40, P50MS: 50, P95MS: 70, P99MS: 90}
	res.CreateFirstExec = &Summary{N: 20, MinMS: 45, P50MS: 55, P95MS: 75, P99MS: 95}
	res.BaselineRunscRestore = &Summary{N: 20, MinMS: 20, P50MS: 25, P95MS: 30, P99MS: 31}
	res.BaselineRunscRun = &Summary{N: 20, MinMS: 100, P50MS: 220, P95MS: 300, P99MS: 350}
	res.ExecRTT = &Summary{N: 20, MinMS: 8, P50MS: 10, P95MS: 12, P99MS: 13}
	res.FloorExecRTT = &Summary{N: 20, MinMS: 0.9, P50MS: 1, P95MS: 1.2, P99MS: 1.3}
	floorRate := 800.0
	res.AttachStream = &AttachStream{MiB: 256, Runs: 3, MBPerS: 200, FloorMBPerS: &floorRate}
	res.Throughput = map[string]float64{"1": 3.5, "8": 12.25, "32": 11}
	cgroup, rss := 30.5, 60.1
	res.Density = &Density{Sandboxes: 300, MiBPerSandbox: &cgroup, RSSMiBPerSandbox: &rss, StoppedBy: "reached --density-max 300"}
	res.note(KeyCreatePooled, "absent: no pool API")
	res.computeRatios()

	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{
		"started_at", "template", "server", "samples", "lifecycle_sandbox",
		"create_pooled", "create_unpooled", "create_first_exec", "exec_rtt", "file_stat", "file_read_4kib", "file_1mib",
		"floor_create_pooled", "floor_exec_rtt", "floor_file_1mib", "attach_stream",
		"pause_resume", "suspend", "resume_suspended", "snapshot", "branch",
		"baseline_runsc_run", "baseline_runsc_restore",
		"throughput", "density", "ratios", "notes",
	}
	if got := sortedKeysOf(top); !reflect.DeepEqual(got, sorted(wantKeys)) {
		t.Errorf("top-level keys:\n got %v\nwant %v", got, sorted(wantKeys))
	}
	// A microvm run says so, and has QEMU's floors.
	vm := &Result{Runtime: "microvm", BaselineQEMUKernel: &Summary{N: 1}, BaselineQEMUBoot: &Summary{N: 1}}
	rawVM, _ := json.Marshal(vm)
	var topVM map[string]json.RawMessage
	if err := json.Unmarshal(rawVM, &topVM); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"runtime", "baseline_qemu_kernel", "baseline_qemu_boot"} {
		if _, ok := topVM[k]; !ok {
			t.Errorf("a microvm result has no %s", k)
		}
	}
	if string(top["create_pooled"]) != "null" {
		t.Errorf("unmeasured create_pooled = %s, want null", top["create_pooled"])
	}

	var summary map[string]any
	if err := json.Unmarshal(top["create_unpooled"], &summary); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeysOf(summary), []string{"min_ms", "n", "p50_ms", "p95_ms", "p99_ms"}; !reflect.DeepEqual(got, want) {
		t.Errorf("summary keys = %v, want %v", got, want)
	}
	if summary["n"] != float64(20) || summary["p50_ms"] != float64(50) {
		t.Errorf("summary = %v", summary)
	}

	var attach map[string]any
	if err := json.Unmarshal(top["attach_stream"], &attach); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeysOf(attach), []string{"dropped_bytes", "floor_mb_per_s", "mb_per_s", "mib", "runs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("attach_stream keys = %v, want %v", got, want)
	}

	var throughput map[string]float64
	if err := json.Unmarshal(top["throughput"], &throughput); err != nil {
		t.Fatal(err)
	}
	if throughput["8"] != 12.25 || len(throughput) != 3 {
		t.Errorf("throughput = %v, want creates/s keyed by concurrency", throughput)
	}

	var density map[string]any
	if err := json.Unmarshal(top["density"], &density); err != nil {
		t.Fatal(err)
	}
	if density["sandboxes"] != float64(300) || density["mib_per_sandbox"] != 30.5 || density["pss_mib_per_sandbox"] != nil {
		t.Errorf("density = %v", density)
	}

	var ratios map[string]float64
	if err := json.Unmarshal(top["ratios"], &ratios); err != nil {
		t.Fatal(err)
	}
	wantRatios := map[string]float64{
		"create_unpooled/baseline_runsc_restore": 2,
		"create_first_exec/baseline_runsc_run":   0.25,
		"create_unpooled/baseline_runsc_run":     0.227,
		"exec_rtt/floor_exec_rtt":                10,
		// A rate's ratio is the floor's over ours, a time ratio like the
		// others: 4 times slower than the floor.
		"attach_stream/floor_attach_stream": 4,
	}
	if !reflect.DeepEqual(ratios, wantRatios) {
		t.Errorf("ratios = %v, want %v (p50 over p50, pooled and files left out: not measured)", ratios, wantRatios)
	}
}

func TestLatenciesCoverEveryLatencyKeyInOrder(t *testing.T) {
	res := &Result{}
	var keys []string
	for _, l := range res.Latencies() {
		keys = append(keys, l.Key)
		if !res.setLatency(l.Key, &Summary{N: 1}) || res.latency(l.Key) == nil {
			t.Errorf("key %s cannot be set and read back", l.Key)
		}
	}
	want := []string{
		KeyCreatePooled, KeyFloorCreatePooled, KeyCreateUnpooled, KeyCreateFirstExec,
		KeyExecRTT, KeyFloorExecRTT, KeyFileStat, KeyFileRead4KiB, KeyFile1MiB, KeyFloorFile1MiB,
		KeyPauseResume, KeySuspend, KeyResumeSuspended, KeySnapshot, KeyBranch,
		KeyBaselineRunscRun, KeyBaselineRunscRestore,
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("Latencies keys = %v, want %v", keys, want)
	}
	if res.setLatency("nope", nil) {
		t.Error("setLatency accepted an unknown key")
	}
}

func TestParseSkip(t *testing.T) {
	skip, err := ParseSkip(" density, throughput,lifecycle,,exec_rtt ")
	if err != nil {
		t.Fatal(err)
	}
	// exec_rtt takes its floor with it.
	want := []string{KeyBranch, KeyDensity, KeyExecRTT, KeyFloorExecRTT, KeyPauseResume, KeyResumeSuspended, KeySnapshot, KeySuspend, KeyThroughput}
	if got := sortedKeysOf(skip); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSkip = %v, want %v", got, want)
	}
	floors, err := ParseSkip("floors")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeysOf(floors), []string{KeyFloorAttachStream, KeyFloorCreatePooled, KeyFloorExecRTT, KeyFloorFile1MiB}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSkip(floors) = %v, want %v", got, want)
	}
	if _, err := ParseSkip("densty"); err == nil {
		t.Error("ParseSkip accepted a misspelt key")
	}
	if skip, err := ParseSkip(""); err != nil || len(skip) != 0 {
		t.Errorf("ParseSkip(\"\") = %v, %v", skip, err)
	}
}

func TestNoteKeepsEarlierText(t *testing.T) {
	res := &Result{}
	res.note("x", "first")
	res.note("x", "second")
	res.note("x", "second")
	if res.Notes["x"] != "first; second" {
		t.Errorf("note = %q", res.Notes["x"])
	}
}

func sortedKeysOf[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
