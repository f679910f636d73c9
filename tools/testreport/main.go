// Command testreport reads `go test -json` on stdin and prints what a
// person watching a long run needs: progress that packages print outside
// any test (TestMain's builds), each package's result as it ends, and the
// whole output of every test that failed. At the end it writes the 25
// slowest tests and packages to a report file (scripts/test.sh writes
// .tools/test-times.txt), so that where a run's time went is never a
// guess. It exits 1 when a test, a package or a build failed.
//
//	go test -json ./... | go run ./tools/testreport -report .tools/test-times.txt
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus
// the build events cmd/go adds).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// key names a test within its package.
type key struct{ pkg, test string }

// run is what the report keeps of a whole run.
type run struct {
	out io.Writer
	// first and last are the times of the stream's first and last
	// events: the run's wall time, also when the stream is read back
	// from a file.
	first, last time.Time
	tests       map[key]float64 // elapsed seconds of each ended test
	packages    map[string]float64
	outputs     map[key]*strings.Builder // of tests still running
	skips       map[key]string           // the skip's reason (its last output line)
	failedTests []key
	// why holds each failed test's first messages (its "x_test.go:12:"
	// lines), repeated under "failed:" at the end: a long test's own
	// output (a server log it dumps) can push them out of a CI tail.
	why        map[key][]string
	failedPkgs []string
	builds     map[string]*strings.Builder // build output by import path
	failed     bool
}

func newRun(out io.Writer) *run {
	return &run{
		out: out, tests: map[key]float64{}, packages: map[string]float64{},
		outputs: map[key]*strings.Builder{}, skips: map[key]string{},
		builds: map[string]*strings.Builder{}, why: map[key][]string{},
	}
}

func (r *run) handle(ev event) {
	if !ev.Time.IsZero() {
		if r.first.IsZero() {
			r.first = ev.Time
		}
		r.last = ev.Time
	}
	switch ev.Action {
	case "build-output":
		b := r.builds[ev.ImportPath]
		if b == nil {
			b = &strings.Builder{}
			r.builds[ev.ImportPath] = b
		}
		b.WriteString(ev.Output)
		return
	case "build-fail":
		r.failed = true
		if b := r.builds[ev.ImportPath]; b != nil {
			fmt.Fprint(r.out, b.String())
		}
		fmt.Fprintf(r.out, "BUILD FAIL %s\n", ev.ImportPath)
		return
	}
	if ev.Test == "" {
		r.handlePackage(ev)
		return
	}
	k := key{ev.Package, ev.Test}
	switch ev.Action {
	case "run":
		r.outputs[k] = &strings.Builder{}
	case "output":
		if b := r.outputs[k]; b != nil {
			b.WriteString(ev.Output)
		}
	case "pass", "fail", "skip":
		r.tests[k] = ev.Elapsed
		out := r.outputs[k]
		delete(r.outputs, k)
		switch ev.Action {
		case "fail":
			r.failed = true
			r.failedTests = append(r.failedTests, k)
			if out != nil {
				fmt.Fprintf(r.out, "=== %s %s\n%s", ev.Package, ev.Test, out.String())
				r.why[k] = messages(out.String())
			}
		case "skip":
			if out != nil {
				r.skips[k] = skipReason(out.String())
			}
		}
	}
}

// handlePackage prints output of a package that belongs to no test
// (progress of a TestMain, a panic) as it comes, and the package's result.
func (r *run) handlePackage(ev event) {
	switch ev.Action {
	case "output":
		line := ev.Output
		// The "ok"/"FAIL" summary lines and the verbose markers are
		// printed by the result below.
		if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "ok\t") || strings.HasPrefix(line, "FAIL") ||
			strings.HasPrefix(line, "PASS") || strings.HasPrefix(line, "?") || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "=== ") {
			return
		}
		fmt.Fprintf(r.out, "%s: %s", short(ev.Package), line)
		if !strings.HasSuffix(line, "\n") {
			fmt.Fprintln(r.out)
		}
	case "pass":
		r.packages[ev.Package] = ev.Elapsed
		fmt.Fprintf(r.out, "ok    %-60s %7.1fs\n", ev.Package, ev.Elapsed)
	case "fail":
		r.failed = true
		r.packages[ev.Package] = ev.Elapsed
		r.failedPkgs = append(r.failedPkgs, ev.Package)
		// Output of tests that never ended (a timeout's panic kills the
		// binary mid-test).
		for k, b := range r.outputs {
			if k.pkg == ev.Package && b.Len() > 0 {
				fmt.Fprintf(r.out, "=== %s %s (did not end)\n%s", k.pkg, k.test, b.String())
				delete(r.outputs, k)
			}
		}
		fmt.Fprintf(r.out, "FAIL  %-60s %7.1fs\n", ev.Package, ev.Elapsed)
	}
}

// skipReason is the message of t.Skip: the last line before "--- SKIP".
func skipReason(out string) string {
	var last string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		last = l
	}
	// "harness_test.go:42: the reason": drop the position.
	if _, after, ok := strings.Cut(last, ": "); ok && strings.Contains(last[:len(last)-len(after)], ".go:") {
		return after
	}
	return last
}

// Limits of what the report repeats of a failed test's output.
const (
	maxMessages    = 6
	maxMessageText = 300
)

// messages picks a test's first log lines ("    x_test.go:12: text"),
// which are its t.Error and t.Fatal messages and whatever it logged
// before them, shortened to fit a summary.
func messages(out string) []string {
	var picked []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		pos, _, ok := strings.Cut(l, ": ")
		if !ok || !strings.Contains(pos, "_test.go:") || strings.ContainsAny(pos, " \t") {
			continue
		}
		if r := []rune(l); len(r) > maxMessageText {
			l = string(r[:maxMessageText]) + "…"
		}
		picked = append(picked, l)
		if len(picked) == maxMessages {
			break
		}
	}
	return picked
}

func short(pkg string) string {
	if i := strings.Index(pkg, "/internal/"); i >= 0 {
		return pkg[i+1:]
	}
	if i := strings.Index(pkg, "/test/"); i >= 0 {
		return pkg[i+1:]
	}
	return pkg
}

// report writes the slowest tests and packages, the failures and the
// skips.
func (r *run) report(w io.Writer, top int) {
	wall := r.last.Sub(r.first)
	fmt.Fprintf(w, "go test wall time: %s (%d packages, %d tests)\n\n", wall.Round(time.Second), len(r.packages), len(r.tests))
	type timed struct {
		name string
		s    float64
	}
	var pkgs []timed
	for p, s := range r.packages {
		pkgs = append(pkgs, timed{p, s})
	}
	// Top-level tests only: a subtest's time is inside its parent's.
	var tests []timed
	for k, s := range r.tests {
		if !strings.Contains(k.test, "/") {
			tests = append(tests, timed{short(k.pkg) + " " + k.test, s})
		}
	}
	for _, list := range [][]timed{pkgs, tests} {
		sort.Slice(list, func(i, j int) bool {
			return list[i].s > list[j].s || list[i].s == list[j].s && list[i].name < list[j].name
		})
	}
	fmt.Fprintf(w, "slowest %d packages (seconds):\n", top)
	for _, p := range pkgs[:min(top, len(pkgs))] {
		fmt.Fprintf(w, "%8.1f  %s\n", p.s, p.name)
	}
	fmt.Fprintf(w, "\nslowest %d tests (seconds):\n", top)
	for _, t := range tests[:min(top, len(tests))] {
		fmt.Fprintf(w, "%8.1f  %s\n", t.s, t.name)
	}
	if len(r.skips) > 0 {
		reasons := map[string]int{}
		for k, why := range r.skips {
			if !strings.Contains(k.test, "/") {
				reasons[why]++
			}
		}
		var list []string
		for why := range reasons {
			list = append(list, why)
		}
		sort.Slice(list, func(i, j int) bool {
			return reasons[list[i]] > reasons[list[j]] || reasons[list[i]] == reasons[list[j]] && list[i] < list[j]
		})
		fmt.Fprintf(w, "\nskipped tests by reason:\n")
		for _, why := range list {
			fmt.Fprintf(w, "%5d  %s\n", reasons[why], why)
		}
	}
	if r.failed {
		fmt.Fprintf(w, "\nfailed:\n")
		for _, k := range r.failedTests {
			fmt.Fprintf(w, "  %s %s\n", short(k.pkg), k.test)
			for _, m := range r.why[k] {
				fmt.Fprintf(w, "      %s\n", m)
			}
		}
		for _, p := range r.failedPkgs {
			fmt.Fprintf(w, "  package %s\n", p)
		}
	}
}

// line is one line of one input.
type line struct {
	text []byte
	err  error // the input's read error, with text nil
}

// readLines sends the lines of each input to one channel, which is closed
// after the last input ends: streams of go test runs side by side arrive
// whole line by line, never interleaved within a line.
func readLines(inputs []io.Reader) <-chan line {
	out := make(chan line)
	var wg sync.WaitGroup
	for _, in := range inputs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(in)
			sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
			for sc.Scan() {
				out <- line{text: slices.Clone(sc.Bytes())}
			}
			if err := sc.Err(); err != nil {
				out <- line{err: err}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

func main() {
	reportPath := flag.String("report", "", "write the timing report to this file too")
	rawPath := flag.String("raw", "", "write every line read to this file (the combined go test -json stream)")
	top := flag.Int("top", 25, "how many of the slowest tests and packages to list")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testreport [-report FILE] [-raw FILE] [-top N] [go test -json streams...; default stdin]")
		flag.PrintDefaults()
	}
	flag.Parse()
	inputs := []io.Reader{os.Stdin}
	if flag.NArg() > 0 {
		inputs = nil
		for _, name := range flag.Args() {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testreport:", err)
				os.Exit(2)
			}
			defer f.Close()
			inputs = append(inputs, f)
		}
	}
	var raw *bufio.Writer
	if *rawPath != "" {
		f, err := os.Create(*rawPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		raw = bufio.NewWriter(f)
		defer raw.Flush()
	}
	r := newRun(os.Stdout)
	readFailed := false
	for l := range readLines(inputs) {
		if l.err != nil {
			fmt.Fprintln(os.Stderr, "testreport: read:", l.err)
			readFailed = true
			continue
		}
		if raw != nil {
			raw.Write(l.text)
			raw.WriteByte('\n')
		}
		var ev event
		if len(l.text) == 0 || l.text[0] != '{' || json.Unmarshal(l.text, &ev) != nil {
			// cmd/go's own messages (a package that does not build,
			// "go: downloading") are not JSON.
			fmt.Fprintf(os.Stdout, "%s\n", l.text)
			continue
		}
		r.handle(ev)
	}
	var sb strings.Builder
	r.report(&sb, *top)
	fmt.Print("\n" + sb.String())
	if *reportPath != "" {
		if err := os.WriteFile(*reportPath, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		fmt.Printf("(report written to %s)\n", *reportPath)
	}
	if readFailed {
		os.Exit(2)
	}
	if r.failed {
		os.Exit(1)
	}
}
