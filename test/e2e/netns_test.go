package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// Sandboxes made before and after another tool's `ip netns add` (which
// bind-mounts /run/netns onto itself, hiding the namespace mounts in it)
// run and are deleted completely: the server keeps its namespaces in its
// own directory, which no mount in /run/netns reaches.
func TestSandboxesSurviveIPNetnsAdd(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	peerInvalidBefore := ipLinkComplains()

	before := newSandbox(t, apiv1.CreateSandboxRequest{})
	name := fmt.Sprintf("spacetest-ipnetns%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	after := newSandbox(t, apiv1.CreateSandboxRequest{})

	for _, sb := range []*apiv1.Sandbox{before, after} {
		if got := strings.TrimSpace(execOK(t, sb.ID, "echo alive")); got != "alive" {
			t.Fatalf("exec in %s: %q", sb.ID, got)
		}
		files := namespaceFiles(env.dataDir, sb.ID)
		if len(files) != 2 {
			t.Fatalf("namespace files of %s: %v, want its two", sb.ID, files)
		}
		for _, f := range files {
			if filepath.Dir(f) != filepath.Join(env.dataDir, "netns") {
				t.Errorf("namespace file %s outside the server's directory", f)
			}
		}
	}
	for _, sb := range []*apiv1.Sandbox{before, after} {
		if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("delete %s: %v", sb.ID, err)
		}
		if left := leftovers(sb.ID); len(left) > 0 {
			t.Errorf("sandbox %s left %v", sb.ID, left)
		}
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], "space-"+sb.ID) {
				t.Errorf("sandbox %s left a mount: %s", sb.ID, line)
			}
		}
	}
	// Another installation's stale file in /run/netns would make ip link
	// complain whatever this server does; then there is nothing to learn.
	if ipLinkComplains() && !peerInvalidBefore {
		t.Error(`ip link prints "Peer netns reference is invalid"`)
	}
}

func ipLinkComplains() bool {
	out, _ := exec.Command("ip", "link").CombinedOutput()
	return strings.Contains(string(out), "Peer netns reference is invalid")
}

// After an upgrade, recovery removes the slot an older version left in
// /run/netns for a sandbox of this server that no longer runs, and leaves
// the namespaces there that are not its own (another installation's).
func TestRecoveryRemovesOldLocationSlots(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	stranger := fmt.Sprintf("%s%05d", "zz0stranger", os.Getpid()%100000)
	for _, ns := range []string{"space-" + sb.ID, "space-" + sb.ID + "-gw", "space-" + stranger, "space-" + stranger + "-gw"} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	}
	restartServer(t)
	for _, ns := range []string{"space-" + sb.ID, "space-" + sb.ID + "-gw"} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			t.Errorf("old-location namespace %s of a suspended sandbox survived recovery", ns)
		}
	}
	for _, ns := range []string{"space-" + stranger, "space-" + stranger + "-gw"} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			t.Errorf("recovery removed %s, which is not this server's: %v", ns, err)
		}
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "true")
	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(sb.ID); len(left) > 0 {
		t.Errorf("sandbox %s left %v", sb.ID, left)
	}
}
