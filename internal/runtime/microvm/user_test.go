package microvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestUIDLeases(t *testing.T) {
	leases, root := t.TempDir(), t.TempDir()
	dir := func(name string) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	lease := func(id, d string) uint32 {
		t.Helper()
		uid, err := leaseUIDIn(leases, id, d)
		if err != nil {
			t.Fatal(err)
		}
		if uid < uidBase || uid >= uidBase+uidCount {
			t.Fatalf("uid %d outside the range", uid)
		}
		return uid
	}
	a, b := dir("a"), dir("b")
	// One id twice (as ids that hash alike): the second moves on.
	ua, ub := lease("x", a), lease("x", b)
	if ua == ub {
		t.Fatalf("two live sandboxes share uid %d", ua)
	}
	// A release of another's lease does nothing.
	releaseUIDIn(leases, ua, b)
	if uc := lease("x", dir("c")); uc == ua || uc == ub {
		t.Fatalf("uid %d leased twice", uc)
	}
	// A lease whose sandbox directory is gone (a crash) is free again.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	if ud := lease("x", dir("d")); ud != ub {
		t.Errorf("stale lease of %d not taken over (got %d)", ub, ud)
	}
	releaseUIDIn(leases, ua, a)
	if ue := lease("x", dir("e")); ue != ua {
		t.Errorf("released uid %d not leased again (got %d)", ua, ue)
	}

	// Allocations at once never hand out one uid twice.
	var mu sync.Mutex
	seen := map[uint32]bool{}
	var wg sync.WaitGroup
	for i := range 16 {
		d := dir("p" + strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid, err := leaseUIDIn(leases, "same", d)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || seen[uid] {
				t.Errorf("concurrent lease: %d, %v (seen before: %v)", uid, err, seen[uid])
			}
			seen[uid] = true
		}()
	}
	wg.Wait()
}

// assertUnprivileged checks, from /proc, that a running guest's QEMU is
// what a guest that takes it over would find itself as: the sandbox's
// uid and gid from the range in every thread, no capabilities, only
// those of qemuKeepCaps in its bounding set, no_new_privs, its seccomp
// filter, the state directory as its root. It returns the uid and pid.
func assertUnprivileged(t *testing.T, r *Runtime, id string) (uint32, int) {
	t.Helper()
	v, err := r.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	uid := v.conf.UID
	if uid < uidBase || uid >= uidBase+uidCount {
		t.Errorf("%s: QEMU's uid %d is outside the range", id, uid)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", v.pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("%s: QEMU's threads: %v", id, err)
	}
	var bnd uint64
	for _, c := range qemuKeepCaps {
		bnd |= 1 << c
	}
	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", v.pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		status := string(data)
		for _, want := range []string{
			fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid),
			fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid),
			fmt.Sprintf("Groups:\t%d \n", uid),
			"CapInh:\t0000000000000000\n", "CapPrm:\t0000000000000000\n", "CapEff:\t0000000000000000\n",
			fmt.Sprintf("CapBnd:\t%016x\n", bnd), "CapAmb:\t0000000000000000\n",
			"NoNewPrivs:\t1\n", "Seccomp:\t2\n",
		} {
			if !strings.Contains(status, want) {
				t.Errorf("%s: QEMU thread %s lacks %q:\n%s", id, task.Name(), strings.TrimSpace(want), status)
			}
		}
	}
	if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", v.pid)); err != nil || root != v.dir {
		t.Errorf("%s: QEMU's root is %q (%v), want its state directory", id, root, err)
	}
	return uid, v.pid
}

// assertCannotReach runs, as the uid of one guest's QEMU, what a guest
// that took that QEMU over would try against another's: signal it, read
// its memory and environment, list its state directory; and list its
// own root (the chroot), which holds nothing it may open either. The
// same probe as root must reach everything, or it proves nothing.
func assertCannotReach(t *testing.T, fromUID uint32, fromDir string, victimPID int, victimDir string) {
	t.Helper()
	script := fmt.Sprintf(`kill -0 %[1]d 2>/dev/null && echo signal
head -c1 /proc/%[1]d/environ >/dev/null 2>&1 && echo environ
head -c1 /proc/%[1]d/cmdline >/dev/null 2>&1 && echo cmdline
dd if=/proc/%[1]d/mem bs=1 count=1 skip=4194304 >/dev/null 2>&1 && echo mem
ls %[2]s >/dev/null 2>&1 && echo victim-dir
ls %[3]s >/dev/null 2>&1 && echo own-root
echo end`, victimPID, victimDir, fromDir)
	probe := func(cred *syscall.Credential) string {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("probe: %v: %s", err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := probe(&syscall.Credential{Uid: fromUID, Gid: fromUID}); got != "cmdline end" {
		t.Errorf("uid %d reaches another guest's QEMU: %q", fromUID, got)
	}
	// /proc/<pid>/mem of a stopped-at-nothing QEMU reads as root only
	// where the address is mapped; the others must all pass.
	if got := probe(nil); !strings.Contains(got, "signal environ cmdline") || !strings.Contains(got, "victim-dir own-root end") {
		t.Errorf("the probe as root reaches only %q: it proves nothing", got)
	}
}

// leaseHolder is where uid's lease points, "" without one.
func leaseHolder(uid uint32) string {
	holder, _ := os.Readlink(filepath.Join(uidLeaseDir, strconv.FormatUint(uint64(uid), 10)))
	return holder
}
