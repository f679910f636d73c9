package network

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// privateMountsEnv marks the child process of inPrivateMounts.
const privateMountsEnv = "SPACE_NETWORK_TEST_PRIVATE_MOUNTS"

// inPrivateMounts runs the calling test again in a child process that has
// a mount namespace of its own, with an empty tmpfs on /run, and reports
// whether this is that child. There the test may run `ip netns add`, which
// changes the mount table for good, without touching the host's: other
// tests and servers on the machine use /run/netns. Network namespaces and
// links are not per mount namespace; the tests remove theirs.
func inPrivateMounts(t *testing.T) bool {
	t.Helper()
	requireRoot(t)
	if os.Getenv(privateMountsEnv) != "" {
		if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("tmpfs on /run: %v", err)
		}
		return true
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), privateMountsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a mount namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("test in a mount namespace of its own: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the test did not pass in the child")
	}
	return false
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1000000)
}

func ipCommand(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}

// ipNetnsAdd runs `ip netns add` as another tool on the host would, and
// gives the host a link whose peer is in that namespace, so that `ip link`
// maps every file in /run/netns to see which one it is.
func ipNetnsAdd(t *testing.T) {
	t.Helper()
	name, link := uniqueName("spacetest-other"), uniqueName("spo")
	ipCommand(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	ipCommand(t, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", link).Run() })
	if root, err := isMountRoot(LegacyDir); err != nil || !root {
		t.Fatalf("ip netns add did not bind-mount %s onto itself (%v), so this test tries nothing", LegacyDir, err)
	}
}

// requireNothingLeft fails if anything of the slots is still mounted or on
// disk, in the test's directory or in LegacyDir, or if `ip link` finds a
// namespace file it cannot use.
func requireNothingLeft(t *testing.T, names ...string) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], nsPrefix+name) {
				t.Errorf("slot %s: mount left: %s", name, line)
			}
		}
		for _, dir := range []string{testSlots.Dir(), LegacyDir} {
			for _, file := range []string{nsPrefix + name, nsPrefix + name + gatewaySuffix} {
				if _, err := os.Lstat(filepath.Join(dir, file)); err == nil {
					t.Errorf("slot %s: %s left in %s", name, file, dir)
				}
			}
		}
	}
	if out, _ := exec.Command("ip", "link").CombinedOutput(); strings.Contains(string(out), "Peer netns reference is invalid") {
		t.Errorf("ip link: %s", out)
	}
}

// Slots made before and after `ip netns add` (which bind-mounts /run/netns
// onto itself and so hid every namespace mount in it) and after a
// recursive bind of a directory above the slots' are removed completely.
func TestSlotsSurviveIPNetnsAdd(t *testing.T) {
	if !inPrivateMounts(t) {
		return
	}
	before, err := testSlots.Create(uniqueName("pre"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = before.Destroy() })
	ipNetnsAdd(t)

	// Other software binding the whole tree recursively elsewhere (a
	// container runtime, say) takes no copy of the slots' mounts, which
	// would keep the namespaces alive and their files busy.
	elsewhere := t.TempDir()
	parent := filepath.Dir(testSlots.Dir())
	if err := unix.Mount(parent, elsewhere, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(elsewhere, unix.MNT_DETACH) })
	if h, err := before.Sandbox.Open(); err != nil {
		t.Fatalf("slot made before ip netns add: %v", err)
	} else {
		h.Close()
	}
	copied := filepath.Join(elsewhere, filepath.Base(testSlots.Dir()), before.Sandbox.Name)
	if root, err := isMountRoot(copied); err == nil && root {
		t.Error("a recursive bind of the parent copied a slot's namespace mount")
	}

	after, err := testSlots.Create(uniqueName("post"))
	if err != nil {
		t.Fatalf("create a slot after ip netns add: %v", err)
	}
	t.Cleanup(func() { _ = after.Destroy() })
	for _, s := range []*Slot{before, after} {
		if !s.Exists() {
			t.Fatalf("slot %s does not exist", s.Name)
		}
		if err := s.Prepare(); err != nil {
			t.Fatalf("slot %s: %v", s.Name, err)
		}
	}
	for _, s := range []*Slot{before, after} {
		if err := s.Destroy(); err != nil {
			t.Fatalf("destroy slot %s: %v", s.Name, err)
		}
	}
	requireNothingLeft(t, before.Name, after.Name)
}

// A slot an older version left in LegacyDir is found there and removed;
// once `ip netns add` has hidden its mount, removing it still succeeds
// (the sandbox's deletion must not fail forever).
func TestLegacySlotsAreUsedAndRemoved(t *testing.T) {
	if !inPrivateMounts(t) {
		return
	}
	makeLegacy := func(name string) *Slot {
		t.Helper()
		if err := os.MkdirAll(LegacyDir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := slotIn(LegacyDir, name)
		if err := s.create(); err != nil {
			t.Fatalf("make a slot as the older version did: %v", err)
		}
		t.Cleanup(func() { _ = s.Destroy() })
		return s
	}
	old := makeLegacy(uniqueName("old"))
	s := testSlots.Slot(old.Name)
	if s.NetNSPath() != old.NetNSPath() || !s.Exists() {
		t.Fatalf("slot of %s: %s, want the one in %s", old.Name, s.NetNSPath(), LegacyDir)
	}
	if names, err := LegacyNames(); err != nil || len(names) != 1 || names[0] != old.Name {
		t.Fatalf("legacy names: %v, %v", names, err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	requireNothingLeft(t, old.Name)

	hidden := makeLegacy(uniqueName("hidden"))
	ipNetnsAdd(t)
	// Its files stay busy beneath the bind, out of reach: the destroy
	// gives up on them after its bounded retries and succeeds (a destroy
	// that waited for them would hang the test to its timeout).
	if err := testSlots.Slot(hidden.Name).Destroy(); err != nil {
		t.Fatalf("destroy a slot whose mount ip netns add hid: %v", err)
	}
}

// The slots' directory is an unbindable mount, whatever it was before.
func TestNamespacesDirectoryIsUnbindable(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "netns")
	for i := 0; i < 2; i++ { // opening again is harmless
		n, err := OpenNamespaces(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[4] == dir {
			count++
			if !strings.Contains(line, " unbindable ") {
				t.Errorf("not unbindable: %s", line)
			}
		}
	}
	if count != 1 {
		t.Errorf("%d mounts on %s, want 1", count, dir)
	}
	if err := unix.Mount(dir, t.TempDir(), "", unix.MS_BIND, ""); err == nil {
		t.Error("the directory could be bind-mounted elsewhere")
	}
}
