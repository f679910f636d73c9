package e2e

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// hugeDirEntries is the size of the directory of
// TestHugeDirectoryListedInBoundedMemory.
const hugeDirEntries = 150_000

// hugeDirName is the name of entry i; the number is parsed back to count
// what the listing returned without a map of names in the test's memory.
func hugeDirName(i int) string { return fmt.Sprintf("an-entry-with-a-longish-name-%06d", i) }

// A directory of 150,000 entries, listed three times at once through the
// API page by page, costs the server (in-process here) only bounded memory,
// returns every name exactly once, and leaves the agent alive.
func TestHugeDirectoryListedInBoundedMemory(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{TimeoutS: 170, Cmd: []string{"/bin/sh", "-c",
		fmt.Sprintf(`mkdir /tmp/huge && cd /tmp/huge && seq 0 %d | awk '{printf "an-entry-with-a-longish-name-%%06d\n", $1}' | xargs touch && ls | wc -l`,
			hugeDirEntries-1)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != strconv.Itoa(hugeDirEntries) {
		t.Fatalf("creating the directory: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	const listers = 3
	var seen [listers][hugeDirEntries]uint8
	runtime.GC()
	debug.FreeOSMemory()
	base := vmRSS(t)
	var peak atomic.Int64
	peak.Store(base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rss := vmRSS(t); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, listers)
	for l := range listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := client.ListDirOptions{Limit: 5000}
			if l == 0 {
				opts.Limit = 0 // the default page size
			}
			for pages := 0; ; pages++ {
				page, err := env.client.ListDirPage(ctx, sb.ID, "/tmp/huge", opts)
				if err != nil {
					errs <- fmt.Errorf("lister %d page %d: %w", l, pages, err)
					return
				}
				if max := map[bool]int{true: 1000, false: opts.Limit}[opts.Limit == 0]; len(page.Entries) > max {
					errs <- fmt.Errorf("lister %d: page of %d entries, limit %d", l, len(page.Entries), max)
					return
				}
				for _, e := range page.Entries {
					n, err := strconv.Atoi(strings.TrimPrefix(e.Name, "an-entry-with-a-longish-name-"))
					if err != nil || n < 0 || n >= hugeDirEntries || e.Name != hugeDirName(n) || e.Path != "/tmp/huge/"+e.Name || e.Type != "file" {
						errs <- fmt.Errorf("lister %d: unexpected entry %+v", l, e)
						return
					}
					seen[l][n]++
				}
				if page.NextCursor == "" {
					return
				}
				opts.Cursor = page.NextCursor
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	growth := peak.Load() - base
	t.Logf("3 listings of %d entries took %s; server RSS %d MiB → peak %d MiB (+%.1f MiB)",
		hugeDirEntries, time.Since(began).Round(time.Millisecond), base>>20, peak.Load()>>20, float64(growth)/(1<<20))
	if growth >= 32<<20 {
		t.Errorf("server RSS grew by %.1f MiB while listing, want < 32 MiB", float64(growth)/(1<<20))
	}
	for l := range listers {
		bad := 0
		for n, c := range seen[l] {
			if c != 1 {
				if bad < 5 {
					t.Errorf("lister %d saw %s %d times", l, hugeDirName(n), c)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("lister %d: %d names not seen exactly once", l, bad)
		}
	}
	// The agent survived and still answers.
	if out := execOK(t, sb.ID, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("exec after the listings = %q", out)
	}
	// A small page of a deep listing, and a bad cursor.
	page, err := env.client.ListDirPage(ctx, sb.ID, "/tmp", client.ListDirOptions{Depth: 2, Limit: 3})
	if err != nil || len(page.Entries) != 3 || page.NextCursor == "" {
		t.Errorf("depth-2 page of /tmp = %+v, %v; want 3 entries and a cursor", page, err)
	}
	if code, e := call(t, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/huge&cursor=..", env.srv.AdminKey, nil); code != 400 {
		t.Errorf("bad cursor = %d %q, want 400", code, e.Message)
	}
	if code, e := call(t, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/huge&limit=10001", env.srv.AdminKey, nil); code != 400 {
		t.Errorf("limit above the maximum = %d %q, want 400", code, e.Message)
	}
}

// vmRSS is the test process's resident set size in bytes.
func vmRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Error(err)
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
