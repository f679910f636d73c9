package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/pkg/apiv1"
)

// footprint counts what sandboxes can leave behind under this server's data
// directory. Host-wide things (processes, namespaces, cgroups) are checked
// per sandbox id by leftovers, so that other activity on the host does not
// disturb the count.
type footprint map[string]int

func measure(t *testing.T) footprint {
	t.Helper()
	f := footprint{}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && strings.HasPrefix(fields[4], env.dataDir) {
			f["mounts"]++
		}
	}
	for name, dir := range map[string]string{
		"sandbox volumes": filepath.Join(env.dataDir, "volumes", "sandboxes"),
		"runtime bundles": filepath.Join(env.dataDir, "runtime", "bundles"),
		"runsc state":     filepath.Join(env.dataDir, "runtime", "runsc"),
		"images":          filepath.Join(env.dataDir, "images"),
	} {
		entries, _ := os.ReadDir(dir)
		f[name] = len(entries)
	}
	out, err := exec.Command("btrfs", "subvolume", "list", filepath.Join(env.dataDir, "volumes")).Output()
	if err == nil {
		f["btrfs subvolumes"] = strings.Count(string(out), "\n")
	}
	return f
}

// leftovers lists what of one sandbox still exists on the host.
func leftovers(id string) []string {
	var left []string
	if runtimeProcesses(id) > 0 {
		left = append(left, "processes")
	}
	left = append(left, namespaceFiles(env.dataDir, id)...)
	for _, p := range []string{"/sys/fs/cgroup/memory/space/" + id, "/sys/fs/cgroup/pids/space/" + id, "/sys/fs/cgroup/cpu/space/" + id,
		"/sys/class/net/" + network.UplinkName(id)} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// namespaceFiles lists the network namespace files of sandbox id that
// exist: in the server's directory (<data-dir>/netns) and where older
// versions kept them (/run/netns).
func namespaceFiles(dataDir, id string) []string {
	var left []string
	for _, dir := range []string{filepath.Join(dataDir, "netns"), network.LegacyDir} {
		for _, name := range []string{"space-" + id, "space-" + id + "-gw"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				left = append(left, filepath.Join(dir, name))
			}
		}
	}
	return left
}

// Nothing is left behind after many create/delete cycles. Every sandbox's
// own leftovers are checked by id, so one leaking cycle fails the test;
// 300 cycles pass every per-host pool the node allocates from in blocks
// of 256. SPACE_LEAK_CYCLES overrides the count (1000 or more for a soak;
// each delete costs the kernel btrfs-cleaner time, issue #15).
func TestNoLeaksAfterCreateDeleteCycles(t *testing.T) {
	requireServer(t)
	cycles := 300
	if v := os.Getenv("SPACE_LEAK_CYCLES"); v != "" {
		cycles, _ = strconv.Atoi(v)
	}
	if testing.Short() {
		cycles = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// One sandbox first: runsc creates a shared empty network namespace
	// (a bind mount in its state directory) on first use, once per host.
	warmup := newSandbox(t, apiv1.CreateSandboxRequest{Template: "minimal"})
	if err := env.client.DeleteSandbox(ctx, warmup.ID); err != nil {
		t.Fatal(err)
	}
	before := measure(t)

	const workers = 8
	var (
		idsMu sync.Mutex
		ids   []string
	)
	jobs := make(chan int)
	errs := make(chan error, cycles)
	var wg sync.WaitGroup
	began := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", MemoryMB: 64})
				if err != nil {
					errs <- fmt.Errorf("cycle %d create: %w", i, err)
					continue
				}
				idsMu.Lock()
				ids = append(ids, sb.ID)
				idsMu.Unlock()
				if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
					errs <- fmt.Errorf("cycle %d wait: %w", i, err)
				} else if i%50 == 0 {
					if _, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"true"}}); err != nil {
						errs <- fmt.Errorf("cycle %d exec: %w", i, err)
					}
				}
				if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
					errs <- fmt.Errorf("cycle %d delete: %w", i, err)
				}
			}
		}()
	}
	for i := 0; i < cycles; i++ {
		jobs <- i
		if i > 0 && i%100 == 0 {
			t.Logf("%d/%d cycles, %s", i, cycles, time.Since(began).Round(time.Second))
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	failures := 0
	for err := range errs {
		if failures++; failures <= 5 {
			t.Error(err)
		}
	}
	if failures > 0 {
		t.Fatalf("%d of %d cycles failed", failures, cycles)
	}
	t.Logf("%d create/delete cycles in %s", cycles, time.Since(began).Round(time.Second))

	after := measure(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %d before, %d after %d cycles", k, v, after[k], cycles)
		}
	}
	leaked := 0
	for _, id := range ids {
		if left := leftovers(id); len(left) > 0 {
			if leaked++; leaked <= 5 {
				t.Errorf("sandbox %s left %v", id, left)
			}
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d sandboxes left something behind", leaked, len(ids))
	}
}
