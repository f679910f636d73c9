package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func feed(t *testing.T, r *run, events ...event) {
	t.Helper()
	for _, ev := range events {
		// Through JSON, as the stream arrives.
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.handle(back)
	}
}

func TestReportRanksFailsAndSkips(t *testing.T) {
	var live strings.Builder
	r := newRun(&live)
	const p = "example.com/space/internal/node"
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	feed(t, r,
		event{Time: t0, Action: "output", Package: p, Output: "==> building the minimal template\n"},
		event{Action: "run", Package: p, Test: "TestFast"},
		event{Action: "pass", Package: p, Test: "TestFast", Elapsed: 0.1},
		event{Action: "run", Package: p, Test: "TestSlow"},
		event{Action: "run", Package: p, Test: "TestSlow/sub"},
		event{Action: "pass", Package: p, Test: "TestSlow/sub", Elapsed: 90},
		event{Action: "pass", Package: p, Test: "TestSlow", Elapsed: 95},
		event{Action: "run", Package: p, Test: "TestBroken"},
		event{Action: "output", Package: p, Test: "TestBroken", Output: "    node_test.go:12: want 1, got 2\n"},
		event{Action: "fail", Package: p, Test: "TestBroken", Elapsed: 2},
		event{Action: "run", Package: p, Test: "TestLong"},
		event{Action: "output", Package: p, Test: "TestLong", Output: "=== RUN   TestLong\n"},
		event{Action: "output", Package: p, Test: "TestLong", Output: "    long_test.go:9: full tier (./scripts/test.sh): boots a microVM\n"},
		event{Action: "output", Package: p, Test: "TestLong", Output: "--- SKIP: TestLong (0.00s)\n"},
		event{Action: "skip", Package: p, Test: "TestLong"},
		event{Time: t0.Add(98 * time.Second), Action: "fail", Package: p, Elapsed: 98},
	)
	if !r.failed {
		t.Fatal("a failed test did not fail the run")
	}
	got := live.String()
	for _, want := range []string{"internal/node: ==> building the minimal template", "want 1, got 2", "FAIL  " + p} {
		if !strings.Contains(got, want) {
			t.Errorf("live output lacks %q:\n%s", want, got)
		}
	}
	var rep strings.Builder
	r.report(&rep, 2)
	report := rep.String()
	if !strings.HasPrefix(report, "go test wall time: 1m38s") {
		t.Errorf("wall time is not the span of the events:\n%s", report)
	}
	slow := report[strings.Index(report, "slowest 2 tests"):]
	if !strings.Contains(slow, "95.0  internal/node TestSlow") || strings.Contains(slow, "TestSlow/sub") || strings.Contains(slow, "TestFast") {
		t.Errorf("slowest tests wrong (want TestSlow first, no subtests, only 2):\n%s", report)
	}
	if !strings.Contains(report, "1  full tier (./scripts/test.sh): boots a microVM") {
		t.Errorf("skip reason not reported:\n%s", report)
	}
	if !strings.Contains(report, "internal/node TestBroken\n      node_test.go:12: want 1, got 2\n") {
		t.Errorf("failed test not listed:\n%s", report)
	}
}

func TestPassingRunDoesNotFail(t *testing.T) {
	r := newRun(&strings.Builder{})
	feed(t, r,
		event{Action: "run", Package: "p", Test: "TestA"},
		event{Action: "pass", Package: "p", Test: "TestA", Elapsed: 1},
		event{Action: "pass", Package: "p", Elapsed: 1},
	)
	if r.failed {
		t.Fatal("a passing run failed")
	}
}

func TestBuildFailureFails(t *testing.T) {
	var live strings.Builder
	r := newRun(&live)
	feed(t, r,
		event{Action: "build-output", ImportPath: "p [p.test]", Output: "p/x.go:3:1: syntax error\n"},
		event{Action: "build-fail", ImportPath: "p [p.test]"},
	)
	if !r.failed || !strings.Contains(live.String(), "syntax error") {
		t.Fatalf("a build failure was not reported: failed=%v, %q", r.failed, live.String())
	}
}

// Two streams read side by side arrive line by line: a long line of one
// is never cut by a line of the other.
func TestReadLinesKeepsLinesWhole(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	a := strings.NewReader(long + "\n" + long + "\n")
	b := strings.NewReader(strings.Repeat("short\n", 1000))
	var n int
	for l := range readLines([]io.Reader{a, b}) {
		if l.err != nil {
			t.Fatal(l.err)
		}
		if s := string(l.text); s != long && s != "short" {
			t.Fatalf("a line of %d bytes is neither input's", len(s))
		}
		n++
	}
	if n != 1002 {
		t.Fatalf("read %d lines, want 1002", n)
	}
}

func TestMessagesAreTheFirstLogLinesShortened(t *testing.T) {
	out := "=== RUN   TestCrash\n" +
		"    crash_test.go:280: create/start-ran: acknowledged sandbox sb-1 lost\n" +
		"    crash_test.go:93: server log:\n" +
		"        space: listening on http://127.0.0.1:1\n"
	for i := 0; i < 10; i++ {
		out += "    crash_test.go:351: " + strings.Repeat("x", 400) + "\n"
	}
	got := messages(out)
	if len(got) != maxMessages {
		t.Fatalf("%d messages, want %d: %q", len(got), maxMessages, got)
	}
	if got[0] != "crash_test.go:280: create/start-ran: acknowledged sandbox sb-1 lost" || got[1] != "crash_test.go:93: server log:" {
		t.Errorf("first messages: %q", got[:2])
	}
	if last := got[len(got)-1]; len([]rune(last)) != maxMessageText+1 || !strings.HasSuffix(last, "…") {
		t.Errorf("a long message is not shortened: %d runes", len([]rune(last)))
	}
}
