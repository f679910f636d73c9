package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/runtime/microvm"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// vmTemplate is a minimal-based template built for both runtimes, gVisor
// its default.
const vmTemplate = "vm-minimal"

// readVMSnapshot reads the snapshot a VM's lifecycle took before it
// changed note.txt: the file as it was, its directory listed (read inside
// the snapshot's disk image on the host), a symlink reported, not
// followed, and a missing path a 404.
func readVMSnapshot(t *testing.T, id, snap string) {
	t.Helper()
	ctx := testContext(t)
	begin := time.Now()
	r, err := env.client.ReadFileFromSnapshot(ctx, id, "/home/user/note.txt", snap)
	if err != nil {
		t.Fatalf("read from the snapshot: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "kept on the guest's disk" {
		t.Fatalf("the snapshot's note.txt: %q, %v", got, err)
	}
	t.Logf("read a file of a VM's snapshot: %s", time.Since(begin).Round(time.Millisecond))
	req, _ := http.NewRequestWithContext(ctx, "GET", env.srv.URL+"/v1/sandboxes/"+id+"/files?path=/home/user&snapshot="+snap, nil)
	req.Header.Set("Authorization", "Bearer "+env.srv.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list apiv1.FileList
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list the snapshot's /home/user: %s, %v", resp.Status, err)
	}
	var note *apiv1.FileEntry
	for i, e := range list.Entries {
		if e.Name == "note.txt" {
			note = &list.Entries[i]
		}
	}
	if note == nil || note.Type != "file" || note.Size != int64(len("kept on the guest's disk")) || note.Path != "/home/user/note.txt" || note.ModifiedAt.IsZero() || note.Owner == "" {
		t.Fatalf("the snapshot's listing: %+v", list.Entries)
	}
	if _, err := env.client.ReadFileFromSnapshot(ctx, id, "/home/user/nope", snap); !client.IsNotFound(err) {
		t.Fatalf("a missing path of the snapshot: %v, want 404", err)
	}
	if _, err := env.client.ReadFileFromSnapshot(ctx, id, "/home/user/note-link", snap); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a symlink of the snapshot: %v, want it reported", err)
	}
}

// vmDiskMB is the lifecycle sandbox's disk_mb: above its template's image
// (the content and some headroom), so that the guest's disk is grown.
const vmDiskMB = 320

// requireDiskLimit checks that a microVM sandbox's disk is its disk_mb:
// the guest's root filesystem was grown to it, a write past it ends with
// "no space left" in the guest (not an I/O error from the host's quota,
// which would abort the guest's journal), and writes succeed again once
// the space is freed.
func requireDiskLimit(t *testing.T, id string, diskMB int) {
	t.Helper()
	size, err := strconv.Atoi(strings.TrimSpace(execOK(t, id, "df -m / | awk 'NR==2 {print $2}'")))
	if err != nil || size < diskMB*9/10 || size > diskMB {
		t.Fatalf("the guest's root filesystem is %d MiB (%v), want about its disk_mb %d", size, err, diskMB)
	}
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c",
		fmt.Sprintf("dd if=/dev/zero of=/home/user/fill bs=1M count=%d conv=fsync", diskMB+64)}, TimeoutS: 240})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left") {
		t.Fatalf("a write past disk_mb: exit %d, %q; want no space left", res.ExitCode, res.Stderr)
	}
	if out := execOK(t, id, "rm /home/user/fill && echo kept > /home/user/after && cat /home/user/after"); out != "kept\n" {
		t.Fatalf("after the disk was full: %q", out)
	}
}

// A sandbox of a template built for both runtimes, created on microvm,
// runs in a QEMU guest (TCG here) and does what a gVisor sandbox does
// through the API: exec, files, a session re-attached by offset, pause
// and resume, suspend and resume with its memory, a snapshot restored,
// three branches diverging with the counter going on in each; deleted,
// it leaves no QEMU, cgroup, network slot or volume.
func TestMicroVMLifecycle(t *testing.T) {
	requireVMTemplate(t, vmTemplate, "gvisor", "microvm")

	begin := time.Now()
	// A warm create: the first of its size boots the image of it first.
	sb := newVMSandbox(t, apiv1.CreateSandboxRequest{Template: vmTemplate, Runtime: "microvm", MemoryMB: 128, VCPUs: 1, DiskMB: vmDiskMB})
	ctx := testContext(t)
	t.Logf("create on microvm to running: %s", time.Since(begin).Round(time.Millisecond))
	// The harness's server runs its guests under TCG (--accel tcg).
	if sb.Runtime != "microvm" || sb.Isolation != "microvm-tcg" {
		t.Fatalf("runtime %q, isolation %q", sb.Runtime, sb.Isolation)
	}
	// A kernel of its own: the guest's, not the host's.
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if guest := strings.TrimSpace(execOK(t, sb.ID, "uname -r")); guest == strings.TrimSpace(string(host)) {
		t.Fatalf("the guest runs the host's kernel %s", guest)
	}
	begin = time.Now()
	if out := execOK(t, sb.ID, "echo hello from $(hostname)"); out != "hello from "+sb.ID+"\n" {
		t.Fatalf("exec said %q", out)
	}
	t.Logf("exec round trip: %s", time.Since(begin).Round(time.Millisecond))
	requireDiskLimit(t, sb.ID, vmDiskMB)
	// Signals from the guest's root to its init end neither the agent nor
	// the guest (an init's exit panics the guest's kernel); the shell
	// that sends them may die of the forwarded SIGTERM.
	_, _ = env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "kill -SEGV 1; kill -TERM 1; kill -QUIT 1; kill -9 1"}, User: "root"})
	// The agent relays SIGTERM and SIGQUIT to the process groups running
	// when it handles them; under TCG on a busy host that can be after the
	// next command started, which then dies of them (exit -1). The agent
	// and the guest living on is what counts: a command runs within a few
	// tries.
	alive := ""
	for try := 0; try < 5 && alive != "alive\n"; try++ {
		time.Sleep(time.Duration(try) * 500 * time.Millisecond)
		res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo alive"}})
		if err != nil {
			t.Fatalf("after signals to the guest's init: %v", err)
		}
		alive = res.Stdout
	}
	if alive != "alive\n" {
		t.Fatalf("after signals to the guest's init: %q", alive)
	}
	if _, err := env.client.WriteFile(ctx, sb.ID, "/home/user/note.txt", strings.NewReader("kept on the guest's disk")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("read back %q", got)
	}
	reattachByOffset(t, sb.ID)

	pid := startCounter(t, sb.ID)
	before := count(t, sb.ID)
	if _, err := env.client.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	before = requireCounting(t, sb.ID, before, pid)

	begin = time.Now()
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("suspend: %s", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	if got, err := env.client.Resume(ctx, sb.ID); err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("resume after suspend: %+v, %v", got, err)
	}
	t.Logf("resume from suspend: %s", time.Since(begin).Round(time.Millisecond))
	before = requireCounting(t, sb.ID, before, pid)
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("after suspend and resume: %q", got)
	}

	// A snapshot, a change, and the rollback to it.
	execOK(t, sb.ID, "ln -s note.txt /home/user/note-link")
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	execOK(t, sb.ID, "echo changed > /home/user/note.txt")
	readVMSnapshot(t, sb.ID, "s1")
	begin = time.Now()
	if got, err := env.client.Restore(ctx, sb.ID, "s1"); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("restore: %+v, %v", got, err)
	}
	t.Logf("restore of a snapshot: %s", time.Since(begin).Round(time.Millisecond))
	if got := readAll(t, sb.ID, "/home/user/note.txt"); string(got) != "kept on the guest's disk" {
		t.Fatalf("after the rollback: %q", got)
	}
	before = count(t, sb.ID)

	// Three branches: each its own guest, going on from the same memory.
	begin = time.Now()
	branches, err := env.client.Branch(ctx, sb.ID, 3)
	if err != nil || len(branches) != 3 {
		t.Fatalf("branch: %d, %v", len(branches), err)
	}
	t.Logf("branch x3: %s", time.Since(begin).Round(time.Millisecond))
	for _, b := range branches {
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), b.ID) })
		if got, err := env.client.WaitSandbox(ctx, b.ID, apiv1.StateRunning, 2*time.Minute); err != nil || got.Runtime != "microvm" || got.Isolation != sb.Isolation {
			t.Fatalf("branch %s: %+v, %v", b.ID, got, err)
		}
	}
	for _, b := range branches {
		requireCounting(t, b.ID, before, pid)
		execOK(t, b.ID, "echo "+b.ID+" > /home/user/mine.txt")
	}
	for _, b := range append(branches, *sb) {
		want := b.ID
		if b.ID == sb.ID {
			want = "none"
		}
		if got := strings.TrimSpace(execOK(t, b.ID, "cat /home/user/mine.txt 2>/dev/null || echo none")); got != want {
			t.Fatalf("%s sees mine.txt %q, want %q", b.ID, got, want)
		}
	}

	// Deleted, a guest leaves nothing behind.
	for _, b := range append(branches, *sb) {
		if err := env.client.DeleteSandbox(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		requireNothingLeft(t, b.ID)
	}
}

// requireVMTemplate builds (once per server) a minimal-based template for
// runtimes, the first its default, and checks the server says so.
func requireVMTemplate(t *testing.T, name string, runtimes ...string) *apiv1.Template {
	t.Helper()
	requireServer(t)
	if env.noMicroVM != "" {
		t.Skip(env.noMicroVM)
	}
	ctx := testContext(t)
	if _, err := env.client.GetTemplate(ctx, name); err != nil {
		recipe := "from: minimal\nruntime: [" + strings.Join(runtimes, ", ") + "]\n"
		if _, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: name, Recipe: recipe}); err != nil && !client.IsConflict(err) {
			t.Fatalf("create template %s: %v", name, err)
		}
	}
	tpl := waitTemplate(t, name)
	if strings.Join(tpl.Runtimes, ",") != strings.Join(runtimes, ",") || tpl.DefaultRuntime != runtimes[0] {
		t.Fatalf("template %s: runtimes %v, default %q; want %v", name, tpl.Runtimes, tpl.DefaultRuntime, runtimes)
	}
	return tpl
}

// templateImageOf reports whether the server's node holds a complete
// pre-booted image of the template by that name (e.g. "<id>@microvm-1cpu-128mb").
func templateImageOf(name string) bool {
	_, err := os.Stat(filepath.Join(env.dataDir, "images", "templates", name, "space-complete"))
	return err == nil
}

// Across a restart of the server: a microVM sandbox that idleness
// suspended stays suspended and resumes afterwards with its memory (the
// counter goes on) and files; a running one is adopted, the same QEMU
// and nothing started twice, and goes on serving and taking its rolling
// snapshots. Both leave nothing once deleted.
func TestMicroVMServerRestart(t *testing.T) {
	requireVMTemplate(t, vmTemplate, "gvisor", "microvm")
	ctx := testContext(t)
	began := time.Now()
	// One after the other: emulated guests booting side by side on a
	// loaded host miss the agent's start bound.
	// The idle one last, so that it does not go idle while the other
	// boots.
	var ids [2]string
	for i, req := range []apiv1.CreateSandboxRequest{
		{IdleSuspendS: -1, SnapshotIntervalS: e2eSnapshotInterval, SnapshotRetentionS: 3600},
		{IdleSuspendS: 5},
	} {
		req.Template, req.Runtime, req.MemoryMB, req.VCPUs = vmTemplate, "microvm", 128, 1
		sb, err := env.client.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatalf("create sandbox: %v", err)
		}
		ids[i] = sb.ID
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
		if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
	}
	running, idle := ids[0], ids[1]
	created := time.Now()
	idlePID, runningPID := startCounter(t, idle), startCounter(t, running)
	execOK(t, idle, "echo idle > /home/user/mark")
	execOK(t, running, "echo running > /home/user/mark")
	idleBefore := count(t, idle)
	if got, err := env.client.WaitSandbox(ctx, idle, apiv1.StateSuspended, time.Minute); err != nil || got.Reason != "idle" {
		t.Fatalf("idle microvm sandbox: %+v, %v; want suspended for idleness", got, err)
	}
	if left := qemuPIDs(idle); len(left) != 0 {
		t.Fatalf("a suspended guest keeps QEMU %v running", left)
	}
	runningBefore := count(t, running)
	qemu := qemuPIDs(running)
	if len(qemu) != 1 {
		t.Fatalf("running guest: QEMU processes %v", qemu)
	}

	restarted := time.Now()
	restartServer(t)
	t.Logf("server restart: %s", time.Since(restarted).Round(time.Millisecond))
	ctx = testContext(t) // the old client's server is gone

	// The running guest was adopted: its QEMU, its processes.
	if got, err := env.client.GetSandbox(ctx, running); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("running sandbox after the restart: %+v, %v", got, err)
	}
	requireCounting(t, running, runningBefore, runningPID)
	if now := qemuPIDs(running); len(now) != 1 || now[0] != qemu[0] {
		t.Fatalf("adopted guest: QEMU %v after the restart, %v before", now, qemu)
	}
	if got := strings.TrimSpace(execOK(t, running, "cat /home/user/mark")); got != "running" {
		t.Fatalf("adopted guest's file: %q", got)
	}

	// The suspended one stayed so, and comes back with its memory.
	if got, err := env.client.GetSandbox(ctx, idle); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("suspended sandbox after the restart: %+v, %v", got, err)
	}
	resumed := time.Now()
	if got, err := env.client.Resume(ctx, idle); err != nil || got.State != apiv1.StateRunning || got.Runtime != "microvm" {
		t.Fatalf("resume after the restart: %+v, %v", got, err)
	}
	t.Logf("resume after the restart: %s", time.Since(resumed).Round(time.Millisecond))
	requireCounting(t, idle, idleBefore, idlePID)
	if got := strings.TrimSpace(execOK(t, idle, "cat /home/user/mark")); got != "idle" {
		t.Fatalf("resumed guest's file: %q", got)
	}

	// The adopted guest's rolling snapshots go on: one taken after the
	// restart.
	for taken := false; !taken; {
		list, err := env.client.ListSnapshots(ctx, running)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			taken = taken || strings.HasPrefix(s.Name, "auto-") && s.CreatedAt.After(restarted)
		}
		if !taken && time.Since(created) > 150*time.Second {
			t.Fatalf("no rolling snapshot of the adopted guest since the restart: %+v", list)
		}
		time.Sleep(500 * time.Millisecond)
	}
	requireCounting(t, running, runningBefore, runningPID)

	for _, id := range ids {
		if err := env.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		requireNothingLeft(t, id)
	}
	t.Logf("whole test: %s", time.Since(began).Round(time.Second))
}

// qemuPIDs lists the host's QEMU processes of a sandbox.
func qemuPIDs(id string) []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "qemu") && strings.Contains(string(b), id) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// reattachByOffset runs a session that prints numbered lines and reads
// it through several short attaches, each from the offset the last one
// reached: every line arrives once, in order.
func reattachByOffset(t *testing.T, id string) {
	t.Helper()
	ctx := testContext(t)
	const lines = 200
	sess, err := env.client.CreateSession(ctx, id, apiv1.CreateSessionRequest{
		Cmd: []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); if [ $((i %% 50)) = 0 ]; then sleep 0.2; fi; done`, lines)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readByReattaching(t, ctx, id, sess.ID, 3)
	var want strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got != want.String() {
		t.Fatalf("re-attached output differs: %d bytes, want %d", len(got), want.Len())
	}
}

// requireNothingLeft checks that a deleted sandbox left no QEMU process,
// cgroup, network slot or root volume on the host.
func requireNothingLeft(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := vmLeftovers(id)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted sandbox %s left %s", id, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func vmLeftovers(id string) []string {
	var left []string
	for _, pid := range qemuPIDs(id) {
		left = append(left, "a QEMU process ("+pid+")")
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/space", id),
		filepath.Join("/sys/fs/cgroup/memory/space", id),
		filepath.Join(env.dataDir, "netns", "space-"+id),
		filepath.Join(env.dataDir, "volumes", "sandboxes", id),
		filepath.Join(env.dataDir, "microvm", id),
	} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// A microVM sandbox mounts a volume read-write and the same volume
// read-only (virtio-9p shares): what the guest writes, a gVisor sandbox
// mounting the volume and the volume API read at once, with the same
// numeric owner, and the other way round; the read-only mount refuses
// writes. A suspend or snapshot is refused with a 409 that says why (the
// hypervisor cannot save a guest with a share), and the guest runs on.
func TestMicroVMVolumes(t *testing.T) {
	requireVMTemplate(t, vmTemplate, "gvisor", "microvm")
	requireGuest9p(t)
	ctx := testContext(t)
	vol := newVolume(t, "vm-data", 32)
	if _, err := env.client.WriteVolumeFile(ctx, vol.ID, "/seed.txt", strings.NewReader("from the api")); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	vm := newSandbox(t, apiv1.CreateSandboxRequest{Template: vmTemplate, Runtime: "microvm", MemoryMB: 128, VCPUs: 1,
		VolumeMounts: []apiv1.VolumeMount{{Volume: vol.ID, Path: "/mnt/data"}, {Volume: vol.ID, Path: "/mnt/ro", ReadOnly: true}}})
	t.Logf("create on microvm with two mounts to running: %s", time.Since(begin).Round(time.Millisecond))
	if vm.Runtime != "microvm" {
		t.Fatalf("runtime %q", vm.Runtime)
	}
	g := newSandbox(t, apiv1.CreateSandboxRequest{Template: vmTemplate, VolumeMounts: []apiv1.VolumeMount{{Volume: vol.ID, Path: "/data"}}})

	// Booted, not restored (a sandbox that mounts volumes boots): each
	// knows its id as a restored one does.
	for _, sb := range []string{vm.ID, g.ID} {
		if got := execOK(t, sb, "echo $SPACE_SANDBOX_ID"); got != sb+"\n" {
			t.Fatalf("SPACE_SANDBOX_ID of a booted sandbox %s is %q", sb, got)
		}
	}
	owner := execOK(t, vm.ID, "cat /mnt/data/seed.txt >/dev/null && echo from-vm > /mnt/data/vm.txt && mkdir /mnt/data/d && stat -c %u:%g /mnt/data/vm.txt")
	if got := execOK(t, g.ID, "cat /data/vm.txt; stat -c %u:%g /data/vm.txt; ls /data/d"); got != "from-vm\n"+owner {
		t.Fatalf("gVisor sandbox reads %q, want the VM's file owned by %q", got, owner)
	}
	if got := readVolume(t, vol.ID, "/vm.txt"); got != "from-vm\n" {
		t.Fatalf("volume API reads %q", got)
	}
	list, err := env.client.ListVolumeDir(ctx, vol.ID, "/", client.ListDirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range list.Entries {
		if e.Name == "vm.txt" {
			found = true
			if e.Owner+":"+e.Group+"\n" != owner {
				t.Errorf("volume API: vm.txt owned by %s:%s, the guest says %q", e.Owner, e.Group, owner)
			}
		}
	}
	if !found {
		t.Fatalf("volume API lists no vm.txt: %+v", list.Entries)
	}
	execOK(t, g.ID, "echo from-gvisor > /data/g.txt")
	if got := execOK(t, vm.ID, "cat /mnt/data/g.txt /mnt/ro/g.txt; stat -c %u:%g /mnt/data/g.txt"); got != "from-gvisor\nfrom-gvisor\n"+owner {
		t.Fatalf("the VM reads %q", got)
	}
	res, err := env.client.Exec(ctx, vm.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo x > /mnt/ro/w"}})
	if err != nil || res.ExitCode == 0 || !strings.Contains(res.Stderr, "Read-only") {
		t.Fatalf("write to the read-only mount in the VM: %+v %v", res, err)
	}

	// No checkpoint of a guest with a share: a plain 409, and it runs on.
	for what, call := range map[string]func() error{
		"suspend":  func() error { _, err := env.client.Suspend(ctx, vm.ID); return err },
		"snapshot": func() error { _, err := env.client.CreateSnapshot(ctx, vm.ID, "s1"); return err },
	} {
		err := call()
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || !strings.Contains(apiErr.Message, "persistent volumes mounted cannot be suspended") {
			t.Fatalf("%s of a VM with a volume: %v, want a 409 saying why", what, err)
		}
		if strings.Contains(apiErr.Message, "/") {
			t.Errorf("%s refusal names a path: %q", what, apiErr.Message)
		}
	}
	if got, err := env.client.GetSandbox(ctx, vm.ID); err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("after the refusals: %+v, %v", got, err)
	}
	if got := execOK(t, vm.ID, "cat /mnt/data/vm.txt"); got != "from-vm\n" {
		t.Fatalf("after the refusals the VM reads %q", got)
	}
}

// requireGuest9p skips where the guest kernel cache predates the 9p
// modules (scripts/microvm-kernel.sh fetches them on its next run).
func requireGuest9p(t *testing.T) {
	t.Helper()
	dir := os.Getenv("SPACE_MICROVM_KERNEL")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".tools", "microvm", "current")
	}
	if k, err := microvm.LoadKernel(dir); err != nil || !k.Has9p() {
		t.Skip("the guest kernel cache has no 9p modules: run scripts/microvm-kernel.sh again")
	}
}
