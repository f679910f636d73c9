package bench

import (
	"context"
	"strings"
	"testing"
)

// Without busybox ts the floors are timed by /proc/uptime with loops ten
// times longer, and say so; a floor whose script fails is noted under its
// own key, fails the run, and leaves its figure standing.
func TestFloorsFallBackToUptimeAndFailAlone(t *testing.T) {
	f := newFakeServer(true, 2)
	f.inside.noTS, f.inside.failDD = true, true
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err == nil || !strings.Contains(err.Error(), "1 measurements failed: "+KeyFloorFile1MiB) {
		t.Fatalf("Run = %v; want %s alone failed", err, KeyFloorFile1MiB)
	}
	if s := res.FloorExecRTT; s == nil || s.P50MS != ms(fakeBody/(spawnLoop*uptimeScale)) {
		t.Errorf("floor_exec_rtt = %+v; want one of %d spawns timed in %s", s, spawnLoop*uptimeScale, fakeBody)
	}
	if note := res.Notes[KeyFloorExecRTT]; !strings.Contains(note, "/proc/uptime (10 ms resolution") {
		t.Errorf("floor_exec_rtt note %q; want the fallback clock named", note)
	}
	if res.FloorFile1MiB != nil || !strings.Contains(res.Notes[KeyFloorFile1MiB], "No space left on device") {
		t.Errorf("floor_file_1mib = %+v, note %q; want failed with dd's error", res.FloorFile1MiB, res.Notes[KeyFloorFile1MiB])
	}
	if res.File1MiB == nil {
		t.Errorf("file_1mib not measured: %q", res.Notes[KeyFile1MiB])
	}
	if _, ok := res.Ratios["file_1mib/floor_file_1mib"]; ok {
		t.Errorf("a ratio to a floor that failed: %v", res.Ratios)
	}
}

// The same failure on ts: the group exits before its end marker.
func TestFileFloorFailsOnTS(t *testing.T) {
	f := newFakeServer(true, 2)
	f.inside.failDD = true
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err == nil || res.FloorFile1MiB != nil || !strings.Contains(res.Notes[KeyFloorFile1MiB], "no end marker") {
		t.Fatalf("Run = %v, floor_file_1mib %+v, note %q; want failed for want of an end marker", err, res.FloorFile1MiB, res.Notes[KeyFloorFile1MiB])
	}
	if res.FloorExecRTT == nil {
		t.Errorf("floor_exec_rtt not measured: %q", res.Notes[KeyFloorExecRTT])
	}
}

// A server that does not time its claims has no floor for create_pooled:
// absent, not failed; --skip floors takes no floor and runs no timed
// script.
func TestPooledFloorAbsentAndFloorsSkipped(t *testing.T) {
	f := newFakeServer(true, 2)
	f.claimMetric = false
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err != nil {
		t.Fatalf("Run: %v (a missing metric is not a failure)", err)
	}
	if res.FloorCreatePooled != nil || !strings.Contains(res.Notes[KeyFloorCreatePooled], "absent: the server's /metrics has no space_pool_claim_seconds") {
		t.Errorf("floor_create_pooled = %+v, note %q", res.FloorCreatePooled, res.Notes[KeyFloorCreatePooled])
	}
	if res.CreatePooled == nil {
		t.Errorf("create_pooled not measured: %q", res.Notes[KeyCreatePooled])
	}

	f = newFakeServer(true, 2)
	cfg := fakeConfig(t, f)
	floors, _ := ParseSkip("floors")
	for k := range floors {
		cfg.Skip[k] = true
	}
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for k := range floors {
		if res.Notes[k] != "skipped" {
			t.Errorf("note of %s = %q, want skipped", k, res.Notes[k])
		}
	}
	if res.FloorExecRTT != nil || res.AttachStream == nil || res.AttachStream.FloorMBPerS != nil || f.inside.timed != 0 {
		t.Errorf("floor_exec_rtt %+v, attach_stream %+v, %d timed scripts; want no floor", res.FloorExecRTT, res.AttachStream, f.inside.timed)
	}
	if res.ExecRTT == nil || res.CreatePooled == nil {
		t.Errorf("figures missing without their floors: exec_rtt %+v, create_pooled %+v", res.ExecRTT, res.CreatePooled)
	}
}

// Output the server dropped is counted and said; a session that fails
// fails the figure.
func TestAttachStreamCountsDropsAndFails(t *testing.T) {
	f := newFakeServer(true, 2)
	f.inside.drop = 4096
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if a := res.AttachStream; a == nil || a.DroppedBytes != attachRuns*4096 || !strings.Contains(res.Notes[KeyAttachStream], "dropped 12288 bytes") {
		t.Errorf("attach_stream %+v, note %q; want %d bytes dropped and said", a, res.Notes[KeyAttachStream], attachRuns*4096)
	}

	f = newFakeServer(true, 2)
	f.inside.sessionExit = 1
	res, err = Run(context.Background(), fakeConfig(t, f))
	if err == nil || !strings.Contains(err.Error(), KeyAttachStream) {
		t.Fatalf("Run = %v; want attach_stream failed", err)
	}
	if res.AttachStream != nil || !strings.Contains(res.Notes[KeyAttachStream], "exit 1") || !strings.Contains(res.Notes[KeyAttachStream], "head: write error") {
		t.Errorf("attach_stream %+v, note %q; want failed with the session's exit and stderr", res.AttachStream, res.Notes[KeyAttachStream])
	}
	if sbs, _ := f.leftovers(); sbs != 0 {
		t.Errorf("left behind %d sandboxes", sbs)
	}
}

// The file calls check what they read and list.
func TestFileCallsAreMeasuredAndJudged(t *testing.T) {
	f := newFakeServer(false, 0)
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, k := range []string{KeyFileStat, KeyFileRead4KiB} {
		if s := res.latency(k); s == nil || s.N != 3 {
			t.Errorf("%s = %+v (note %q)", k, s, res.Notes[k])
		}
		if !strings.Contains(res.Notes[k], "issue #15's target of 2 ms") {
			t.Errorf("note of %s = %q; want the target", k, res.Notes[k])
		}
	}
}
