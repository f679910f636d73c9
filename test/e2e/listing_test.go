package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
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
// API page by page, costs the server only bounded memory, returns every
// name exactly once, and leaves the agent alive. The server is a separate
// `space serve` (built without the race detector, whose shadow memory
// would swamp what is measured), so its RSS is what a deployment sees.
func TestHugeDirectoryListedInBoundedMemory(t *testing.T) {
	// Its own server, whose memory (not speed) is measured: alongside
	// the other parallel tests.
	inParallelGroup(t)
	s := newCrashServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// gVisor's sentry keeps about 2 KiB per file it has seen: creating the
	// files and stat'ing each once (as any `ls -l` does) costs ~400 MiB of
	// the sandbox's memory whoever lists them, so the sandbox gets room
	// for that; what this test bounds is the agent's and the server's part.
	sb, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{MemoryMB: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := s.client.Exec(ctx, sb.ID, apiv1.ExecRequest{TimeoutS: 170, Cmd: []string{"/bin/sh", "-c",
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
	pid := s.cmd.Process.Pid
	// The baseline is the server as it is once the files exist. Resetting
	// its high-water mark lets VmHWM catch a peak between two samples.
	base := procStatusBytes(t, pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the server's peak RSS: %v", err)
	}
	var peak atomic.Int64
	peak.Store(base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rss := procStatusBytes(t, pid, "VmRSS"); rss > peak.Load() {
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
			// Lister 0 takes default pages whole; the others stream the
			// largest pages entry by entry.
			opts := client.ListDirOptions{Limit: 10000}
			if l == 0 {
				opts.Limit = 0
			}
			for pages := 0; ; pages++ {
				count, bad := 0, error(nil)
				visit := func(e apiv1.FileEntry) error {
					count++
					n, err := strconv.Atoi(strings.TrimPrefix(e.Name, "an-entry-with-a-longish-name-"))
					if err != nil || n < 0 || n >= hugeDirEntries || e.Name != hugeDirName(n) || e.Path != "/tmp/huge/"+e.Name || e.Type != "file" {
						bad = fmt.Errorf("lister %d: unexpected entry %+v", l, e)
						return bad
					}
					seen[l][n]++
					return nil
				}
				var next string
				var err error
				if l == 0 {
					var page *apiv1.FileList
					if page, err = s.client.ListDirPage(ctx, sb.ID, "/tmp/huge", opts); err == nil {
						for _, e := range page.Entries {
							if err = visit(e); err != nil {
								break
							}
						}
						next = page.NextCursor
					}
				} else {
					next, err = s.client.ListDirEach(ctx, sb.ID, "/tmp/huge", opts, visit)
				}
				if err != nil {
					errs <- fmt.Errorf("lister %d page %d: %w", l, pages, err)
					return
				}
				if limit := max(opts.Limit, 1000*map[bool]int{true: 1}[opts.Limit == 0]); count > limit {
					errs <- fmt.Errorf("lister %d: page of %d entries, limit %d", l, count, limit)
					return
				}
				if next == "" {
					return
				}
				opts.Cursor = next
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sampledPeak := peak.Load()
	hwm := procStatusBytes(t, pid, "VmHWM")
	growth := max(sampledPeak, hwm) - base
	t.Logf("3 listings of %d entries took %s; server (pid %d) RSS %.1f MiB → peak %.1f MiB sampled, %.1f MiB high-water mark: +%.1f MiB",
		hugeDirEntries, took.Round(time.Millisecond), pid, mib(base), mib(sampledPeak), mib(hwm), mib(growth))
	if growth >= 32<<20 {
		t.Errorf("server RSS grew by %.1f MiB while listing, want < 32 MiB", mib(growth))
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
	// The agent survived, still answers, and held little: it never had a
	// whole listing in memory.
	res, err = s.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"grep", "^VmRSS", "/proc/1/status"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the listings: %+v, %v", res, err)
	}
	t.Logf("agent: %s", strings.Join(strings.Fields(res.Stdout), " "))
	// A small page of a deep listing, and bad cursors and limits.
	page, err := s.client.ListDirPage(ctx, sb.ID, "/tmp", client.ListDirOptions{Depth: 2, Limit: 3})
	if err != nil || len(page.Entries) != 3 || page.NextCursor == "" {
		t.Errorf("depth-2 page of /tmp = %+v, %v; want 3 entries and a cursor", page, err)
	}
	var apiErr *client.APIError
	if _, err := s.client.ListDirPage(ctx, sb.ID, "/tmp/huge", client.ListDirOptions{Cursor: ".."}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("bad cursor = %v, want 400", err)
	}
	if _, err := s.client.ListDirPage(ctx, sb.ID, "/tmp/huge", client.ListDirOptions{Limit: 10001}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("limit above the maximum = %v, want 400", err)
	}
	if err := s.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.checkNothingLeft([]string{sb.ID})
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// procStatusBytes is a size field (VmRSS, VmHWM) of a process's
// /proc/<pid>/status, in bytes.
func procStatusBytes(t *testing.T, pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Error(err)
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Errorf("%s of %d: %q", field, pid, line)
			}
			return kb << 10
		}
	}
	t.Errorf("no %s in /proc/%d/status", field, pid)
	return 0
}

// A snapshot's directory is listed in pages like a live one, and the
// listing stays inside the snapshot whatever symlinks it holds.
func TestSnapshotDirectoryListedInPages(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)
	execOK(t, sb.ID, "mkdir -p /home/user/d && cd /home/user/d && touch c a e b d && mkdir sub && ln -s /etc link && ln -s /../../.. up")
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "paged"); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "rm -r /home/user/d")
	var names []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("snapshot listing does not end")
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", env.srv.URL+"/v1/sandboxes/"+sb.ID+"/files?path=/home/user/d&snapshot=paged&limit=3&cursor="+cursor, nil)
		req.Header.Set("Authorization", "Bearer "+env.srv.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page apiv1.FileList
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(page.Entries) > 3 {
			t.Fatalf("page %d: %d %+v %v", pages, resp.StatusCode, page, err)
		}
		for _, e := range page.Entries {
			names = append(names, e.Name+":"+e.Type)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if got := strings.Join(names, " "); got != "a:file b:file c:file d:file e:file link:symlink sub:dir up:symlink" {
		t.Errorf("snapshot listing = %s", got)
	}
	// Listing through a symlink that points above the root names the
	// snapshot's own root, never the host's volume directory.
	req, _ := http.NewRequestWithContext(ctx, "GET", env.srv.URL+"/v1/sandboxes/"+sb.ID+"/files?path=/home/user/d/up&snapshot=paged", nil)
	req.Header.Set("Authorization", "Bearer "+env.srv.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var root apiv1.FileList
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range root.Entries {
			seen[e.Name] = true
		}
		if !seen["etc"] || !seen["home"] || seen["sandboxes"] || seen["snapshots"] {
			t.Errorf("listing through the up link escaped the snapshot: %+v", root.Entries)
		}
	} else if resp.StatusCode >= 500 {
		t.Errorf("listing through a symlink = %d", resp.StatusCode)
	}
}
