package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// newVolume creates a volume of the admin key's project in one house; see
// house.volume.
func newVolume(t *testing.T, name string, sizeMB int) *apiv1.Volume {
	t.Helper()
	requireServer(t)
	return oneHouse().volume(t, name, sizeMB)
}

func mounting(vol, path string) apiv1.CreateSandboxRequest {
	return apiv1.CreateSandboxRequest{VolumeMounts: []apiv1.VolumeMount{{Volume: vol, Path: path}}}
}

func readVolume(t *testing.T, ref, path string) string {
	t.Helper()
	return readVolumeOf(t, env.client, ref, path)
}

// readVolumeOf reads a file of a volume through c's volume API.
func readVolumeOf(t *testing.T, c *client.Client, ref, path string) string {
	t.Helper()
	body, err := c.ReadVolumeFile(testContext(t), ref, path)
	if err != nil {
		t.Fatalf("read %s of volume %s: %v", path, ref, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Two sandboxes mounting one volume see each other's writes at once, and
// the files API (the volume's, without a sandbox, and the sandbox's own)
// sees them too; in a cluster the volume lives on one node, and every
// sandbox that mounts it is placed there. A file one sandbox has read and
// another then replaces reads new: gVisor does not serve the bind mount
// from a stale cache. In a cluster, a drain of the volume's node then
// moves none of them, and says why.
func TestVolumesSharedBetweenSandboxes(t *testing.T) {
	inEachHouse(t, func(t *testing.T, h *house) {
		ctx := testContext(t)
		cl := h.admin()
		vol := h.volume(t, "shared-data", 64)
		if vol.SizeMB != 64 || !strings.HasPrefix(vol.ID, "vol-") || len(vol.MountedBy) != 0 || vol.Node == "" {
			t.Fatalf("new volume: %+v", vol)
		}
		if _, err := cl.WriteVolumeFile(ctx, vol.Name, "/seed/hello.txt", strings.NewReader("from the api")); err != nil {
			t.Fatalf("write through the volume API: %v", err)
		}
		a := h.sandbox(t, mounting(vol.Name, "/mnt/data"))
		b := h.sandbox(t, mounting(vol.ID, "/home/user/shared"))
		for _, sb := range []*apiv1.Sandbox{a, b} {
			if sb.Node != vol.Node {
				t.Fatalf("sandbox %s mounting the volume runs on %s, the volume lives on %s", sb.ID, sb.Node, vol.Node)
			}
		}
		if len(a.VolumeMounts) != 1 || a.VolumeMounts[0].Volume != vol.ID || a.VolumeMounts[0].Path != "/mnt/data" {
			t.Fatalf("sandbox view of its mounts: %+v", a.VolumeMounts)
		}
		if got := h.run(t, a.ID, "", "cat /mnt/data/seed/hello.txt"); got != "from the api" {
			t.Fatalf("sandbox a reads %q", got)
		}
		h.run(t, a.ID, "", "echo one > /mnt/data/note && mkdir -p /mnt/data/dir && echo x > /mnt/data/dir/x")
		if got := h.run(t, b.ID, "", "cat /home/user/shared/note"); got != "one\n" {
			t.Fatalf("sandbox b reads %q after a wrote", got)
		}
		// b has read it; a replaces it in place and b must see the new bytes.
		h.run(t, a.ID, "", "echo two-longer > /mnt/data/note")
		if got := h.run(t, b.ID, "", "cat /home/user/shared/note"); got != "two-longer\n" {
			t.Fatalf("sandbox b reads %q after a rewrote the file it had read", got)
		}
		h.run(t, b.ID, "", "rm /home/user/shared/dir/x")
		if out := h.run(t, a.ID, "", "ls /mnt/data/dir | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatalf("a still lists what b removed: %q", out)
		}
		// Through the sandbox files API of b, and the volume API.
		if _, err := cl.WriteFile(ctx, b.ID, "/home/user/shared/by-files-api", strings.NewReader("b")); err != nil {
			t.Fatal(err)
		}
		if got := readVolumeOf(t, cl, vol.ID, "/by-files-api"); got != "b" {
			t.Fatalf("volume API reads %q", got)
		}
		if got := h.run(t, a.ID, "", "cat /mnt/data/by-files-api"); got != "b" {
			t.Fatalf("a reads %q", got)
		}
		// Both write at once, each to files of its own, and publish each
		// with a rename (what docs/api.md advises: appends of two sandboxes
		// to one file are not atomic across them, each sandbox's kernel
		// computing the end of the file from its own view). Every file
		// lands whole and is seen by the other.
		script := func(who, dir string) string {
			return fmt.Sprintf("for i in $(seq 1 100); do echo %s-$i >> %s/%s.log; done; for i in $(seq 1 20); do echo %s > %s/.t-%s-$i && mv %s/.t-%s-$i %s/%s-$i.done; done",
				who, dir, who, who, dir, who, dir, who, dir, who)
		}
		done := make(chan error, 2)
		for _, w := range []struct{ id, who, dir string }{{a.ID, "a", "/mnt/data"}, {b.ID, "b", "/home/user/shared"}} {
			go func() {
				res, err := cl.Exec(ctx, w.id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script(w.who, w.dir)}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
				}
				done <- err
			}()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		for _, who := range []string{"a", "b"} {
			if n := len(strings.Split(strings.TrimSpace(readVolumeOf(t, cl, vol.ID, "/"+who+".log")), "\n")); n != 100 {
				t.Fatalf("%s's own log: %d lines, want 100", who, n)
			}
		}
		if out := h.run(t, a.ID, "", "ls /mnt/data | grep -c 'done$'"); strings.TrimSpace(out) != "40" {
			t.Fatalf("a sees %s renamed files, want 40", out)
		}
		got, err := cl.GetVolume(ctx, vol.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.MountedBy) != 2 || got.UsedBytes == nil || *got.UsedBytes < 1000 {
			t.Fatalf("volume view: %+v", got)
		}
		list, err := cl.ListVolumeDir(ctx, vol.ID, "/", client.ListDirOptions{})
		if err != nil || len(list.Entries) < 4 {
			t.Fatalf("listing of the volume: %+v %v", list, err)
		}
		if h.cluster != nil {
			// One house has no other node to drain to.
			drainKeepsVolumeSandboxes(t, h, vol, []string{a.ID, b.ID})
		}
	})
}

// drainKeepsVolumeSandboxes drains the volume's node: its sandboxes that
// mount the volume stay where they are, running, each event log saying
// why, and the node, draining, takes no new sandbox of the volume.
func drainKeepsVolumeSandboxes(t *testing.T, h *house, vol *apiv1.Volume, ids []string) {
	t.Helper()
	ctx := testContext(t)
	cl := h.admin()
	if _, err := cl.DrainNode(ctx, vol.Node); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d could not be moved", len(ids))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		n, err := cl.GetNode(ctx, vol.Node)
		if err == nil && strings.Contains(n.Reason, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain did not report the sandboxes it left (%q): %+v %v", want, n, err)
		}
	}
	for _, id := range ids {
		sb, err := cl.GetSandbox(ctx, id)
		if err != nil || sb.Node != vol.Node || sb.State != apiv1.StateRunning {
			t.Fatalf("sandbox %s after the drain: %+v %v", id, sb, err)
		}
		evs, err := cl.Events(ctx, id)
		said := false
		for _, ev := range evs {
			said = said || ev.Type == "drain" && strings.Contains(ev.Message, "volumes do not move")
		}
		if err != nil || !said {
			t.Fatalf("sandbox %s's events do not say why it stayed: %+v %v", id, evs, err)
		}
	}
	// A draining node takes no new sandbox, and the refusal says where.
	_, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", VolumeMounts: []apiv1.VolumeMount{{Volume: vol.Name, Path: "/data"}}})
	if err == nil || !strings.Contains(err.Error(), vol.Node) {
		t.Fatalf("create on the draining volume node: %v, want a refusal naming it", err)
	}
}

// A volume's size limit holds inside the sandbox (EDQUOT) and through the
// volume API (507); the sandbox's own disk is not charged for it.
func TestVolumeSizeLimit(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "small-data", 16)
	sb := newSandbox(t, mounting(vol.Name, "/data"))
	res, err := env.client.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/data/big bs=1M count=40 conv=fsync"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "quota") {
		t.Fatalf("writing 40 MiB into a 16 MiB volume: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	execOK(t, sb.ID, "rm -f /data/big && sync")
	_, err = env.client.WriteVolumeFile(ctx, vol.ID, "/big", strings.NewReader(strings.Repeat("z", 40<<20)))
	if !isStatus(err, http.StatusInsufficientStorage) || strings.Contains(err.Error(), env.dataDir) {
		t.Fatalf("volume API write past the limit: %v, want 507 without host paths", err)
	}
	// Freed room is usable again.
	if _, err := env.client.WriteVolumeFile(ctx, vol.ID, "/small", strings.NewReader("fits")); err != nil {
		t.Fatalf("write after the failed one: %v", err)
	}
}

// A volume mounted by a sandbox that has not stopped (suspended included)
// cannot be deleted; once the sandbox is gone it can.
func TestVolumeDeleteRefusedWhileMounted(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "busy-data", 32)
	sb := newSandbox(t, mounting(vol.Name, "/mnt/v"))
	err := env.client.DeleteVolume(ctx, vol.Name)
	if !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), sb.ID) {
		t.Fatalf("delete of a mounted volume: %v, want 409 naming %s", err, sb.ID)
	}
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DeleteVolume(ctx, vol.Name); !isStatus(err, http.StatusConflict) {
		t.Fatalf("delete of a volume a suspended sandbox mounts: %v, want 409", err)
	}
	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DeleteVolume(ctx, vol.Name); err != nil {
		t.Fatalf("delete after the sandbox is gone: %v", err)
	}
	if _, err := env.client.GetVolume(ctx, vol.ID); !client.IsNotFound(err) {
		t.Fatalf("deleted volume: %v, want 404", err)
	}
	// The name is free again, and the new volume is empty.
	again := newVolume(t, "busy-data", 32)
	if list, err := env.client.ListVolumeDir(ctx, again.ID, "/", client.ListDirOptions{}); err != nil || len(list.Entries) != 0 {
		t.Fatalf("a new volume of the same name: %+v %v", list, err)
	}
}

// Suspend keeps a sandbox's volumes attached and resume finds them (with
// what was written meanwhile through the API); snapshots do not copy the
// volume, and a branch mounts the same live volume as its source.
func TestVolumeSuspendResumeSnapshotBranch(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "life-data", 64)
	sb := newSandbox(t, mounting(vol.Name, "/work"))
	execOK(t, sb.ID, "echo before > /work/state")
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if _, err := env.client.WriteVolumeFile(ctx, vol.ID, "/while-suspended", strings.NewReader("meanwhile")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := execOK(t, sb.ID, "cat /work/state /work/while-suspended"); got != "before\nmeanwhile" {
		t.Fatalf("after resume the sandbox reads %q", got)
	}
	execOK(t, sb.ID, "echo after > /work/state")

	snap, err := env.client.CreateSnapshot(ctx, sb.ID, "with-volume")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// The snapshot holds the root filesystem, not the volume.
	if body, err := env.client.ReadFileFromSnapshot(ctx, sb.ID, "/work/state", snap.Name); err == nil {
		b, _ := io.ReadAll(body)
		body.Close()
		t.Fatalf("the snapshot holds the volume's file: %q", b)
	}
	execOK(t, sb.ID, "echo later > /work/state")

	res, err := env.client.Branch(ctx, sb.ID, 1)
	if err != nil {
		t.Fatalf("branch: %v", err)
	}
	br := res[0]
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), br.ID) })
	if _, err := env.client.WaitSandbox(ctx, br.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("branch start: %v", err)
	}
	if got := execOK(t, br.ID, "cat /work/state"); got != "later\n" {
		t.Fatalf("branch reads %q from the shared volume", got)
	}
	execOK(t, br.ID, "echo from-branch > /work/branch")
	if got := execOK(t, sb.ID, "cat /work/branch"); got != "from-branch\n" {
		t.Fatalf("source reads %q of the branch's write", got)
	}
	// A sandbox started from the snapshot mounts the volume too, live.
	from, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("start from the snapshot: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), from.ID) })
	if _, err := env.client.WaitSandbox(ctx, from.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("start from the snapshot: %v", err)
	}
	if got := execOK(t, from.ID, "cat /work/state /work/branch"); got != "later\nfrom-branch\n" {
		t.Fatalf("sandbox from the snapshot reads %q", got)
	}
	_, err = env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: snap.ID, VolumeMounts: []apiv1.VolumeMount{{Volume: vol.ID, Path: "/x"}}})
	if !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("volume_mounts with snapshot: %v, want 400", err)
	}
}

// A server restart keeps the volumes and the sandboxes that mount them.
func TestVolumeSurvivesRestart(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "restart-data", 32)
	sb := newSandbox(t, mounting(vol.Name, "/mnt/keep"))
	execOK(t, sb.ID, "echo kept > /mnt/keep/f")
	restartServer(t)
	if got := execOK(t, sb.ID, "cat /mnt/keep/f"); got != "kept\n" {
		t.Fatalf("after a restart the sandbox reads %q", got)
	}
	got, err := env.client.GetVolume(ctx, vol.Name)
	if err != nil || len(got.MountedBy) != 1 {
		t.Fatalf("volume after a restart: %+v %v", got, err)
	}
	if readVolume(t, vol.ID, "/f") != "kept\n" {
		t.Fatal("volume API lost the file over a restart")
	}
}

// What a volume cannot be, and where it cannot be mounted: clear 4xx
// answers, no host path in them, nothing made.
func TestVolumeBadInput(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "guarded", 32)
	for _, c := range []struct {
		req  apiv1.CreateVolumeRequest
		want int
	}{
		{apiv1.CreateVolumeRequest{Name: vol.Name}, http.StatusConflict},
		{apiv1.CreateVolumeRequest{Name: ""}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "../etc"}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "UPPER"}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "vol-fake"}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: strings.Repeat("a", 64)}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "huge", SizeMB: 1 << 40}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "tiny", SizeMB: 1}, http.StatusBadRequest},
		{apiv1.CreateVolumeRequest{Name: "negative", SizeMB: -5}, http.StatusBadRequest},
	} {
		if _, err := env.client.CreateVolume(ctx, c.req); !isStatus(err, c.want) {
			t.Errorf("create %+v: %v, want %d", c.req, err, c.want)
		}
	}
	for _, p := range []string{"relative", "/", "/proc", "/proc/x", "/dev/v", "/sys", "/.space", "/.space/bin", "/run/space",
		"/run", "/etc", "/usr", "/mnt/../proc", "/mnt/", "/mnt//x", "/bin", "/lib"} {
		_, err := env.client.CreateSandbox(ctx, mounting(vol.Name, p))
		if !isStatus(err, http.StatusBadRequest) {
			t.Errorf("mount at %q: %v, want 400", p, err)
		}
	}
	two := apiv1.CreateSandboxRequest{VolumeMounts: []apiv1.VolumeMount{{Volume: vol.Name, Path: "/a"}, {Volume: vol.Name, Path: "/a/b"}}}
	if _, err := env.client.CreateSandbox(ctx, two); !isStatus(err, http.StatusBadRequest) {
		t.Errorf("nested mounts: %v, want 400", err)
	}
	if _, err := env.client.CreateSandbox(ctx, mounting("no-such-volume", "/data")); !isStatus(err, http.StatusNotFound) {
		t.Errorf("mount of a missing volume: %v, want 404", err)
	}
	// Paths of the files API stay inside the volume, symlinks included.
	sb := newSandbox(t, mounting(vol.Name, "/v"))
	execOK(t, sb.ID, "ln -s / /v/up && ln -s ../../../../etc /v/rel && echo inside > /v/f")
	if got := readVolume(t, vol.ID, "/../../../f"); got != "inside\n" {
		t.Fatalf("/../../../f reads %q", got)
	}
	for _, p := range []string{"/up/etc/passwd", "/rel/passwd", "/../../etc/passwd"} {
		body, err := env.client.ReadVolumeFile(ctx, vol.ID, p)
		if err == nil {
			b, _ := io.ReadAll(body)
			body.Close()
			t.Fatalf("volume read of %s escaped: %q", p, b)
		}
		if strings.Contains(err.Error(), env.dataDir) {
			t.Fatalf("error names a host path: %v", err)
		}
	}
	if _, err := env.client.WriteVolumeFile(ctx, vol.ID, "/up/tmp/escaped", strings.NewReader("x")); err == nil {
		t.Fatal("a write through a planted symlink left the volume")
	}
	if err := env.client.RemoveVolumeFile(ctx, vol.ID, "/"); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("remove of the volume's top: %v, want 400", err)
	}
}

// space volume create|ls|rm and sandbox create --volume.
func TestVolumeCLI(t *testing.T) {
	requireServer(t)
	name := fmt.Sprintf("cli-vol-%d", time.Now().UnixNano()%1e9)
	id, stderr, code := space(t, "", "volume", "create", name, "--size-mb", "32")
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "vol-") {
		t.Fatalf("volume create: %d %q %q", code, id, stderr)
	}
	t.Cleanup(func() { _ = env.client.DeleteVolume(context.Background(), id) })
	sbID, stderr, code := space(t, "", "sandbox", "create", "--template", "minimal", "--wait", "--volume", name+":/mnt/cli")
	sbID = strings.TrimSpace(sbID)
	if code != 0 {
		t.Fatalf("sandbox create --volume: %d %q", code, stderr)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sbID) })
	execOK(t, sbID, "echo cli > /mnt/cli/f")
	out, _, code := space(t, "", "volume", "ls")
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, sbID) {
		t.Fatalf("volume ls: %d %q", code, out)
	}
	if _, stderr, code := space(t, "", "volume", "rm", name); code == 0 || !strings.Contains(stderr, "mounted") {
		t.Fatalf("volume rm of a mounted volume: %d %q", code, stderr)
	}
	if _, _, code := space(t, "", "sandbox", "rm", sbID); code != 0 {
		t.Fatal("sandbox rm failed")
	}
	if _, stderr, code := space(t, "", "volume", "rm", name); code != 0 {
		t.Fatalf("volume rm: %d %q", code, stderr)
	}
	if _, _, code := space(t, "", "volume", "create"); code != 2 {
		t.Fatalf("volume create without a name: exit %d, want 2 (usage)", code)
	}
}

// A host reboot (server, runtimes and namespaces killed) keeps the
// volumes and what they hold; the sandbox rebooted from its disk and the
// suspended one resumed both mount them again.
func TestVolumeHostRebootRecovery(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)
	vol, err := s.client.CreateVolume(ctx, apiv1.CreateVolumeRequest{Name: "reboot-data", SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 2 {
		sb, err := s.client.CreateSandbox(ctx, mounting(vol.Name, "/mnt/r"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.WriteFile(ctx, sb.ID, fmt.Sprintf("/mnt/r/%d", i), strings.NewReader("kept")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	running, suspended := ids[0], ids[1]
	if _, err := s.client.Suspend(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	s.reboot(ids)

	if got, err := s.client.WaitSandbox(ctx, running, apiv1.StateRunning, time.Minute); err != nil || got.Recovered == "" {
		t.Fatalf("running sandbox after reboot: %+v, %v", got, err)
	}
	if _, err := s.client.Resume(ctx, suspended); err != nil {
		t.Fatalf("resume of the suspended sandbox after reboot: %v", err)
	}
	for _, id := range ids {
		res, err := s.client.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "cat /mnt/r/0 /mnt/r/1"}})
		if err != nil || res.Stdout != "keptkept" {
			t.Fatalf("%s after reboot reads %+v, %v", id, res, err)
		}
	}
	got, err := s.client.GetVolume(ctx, vol.ID)
	if err != nil || len(got.MountedBy) != 2 {
		t.Fatalf("volume after reboot: %+v %v", got, err)
	}
	for _, id := range ids {
		if err := s.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.client.DeleteVolume(ctx, vol.ID); err != nil {
		t.Fatal(err)
	}
}

// A read-only mount reads what the volume holds and refuses writes, while
// another sandbox writes to the same volume read-write.
func TestVolumeReadOnlyMount(t *testing.T) {
	ctx := testContext(t)
	vol := newVolume(t, "ro-data", 32)
	if _, err := env.client.WriteVolumeFile(ctx, vol.ID, "/f", strings.NewReader("shared")); err != nil {
		t.Fatal(err)
	}
	ro := newSandbox(t, apiv1.CreateSandboxRequest{VolumeMounts: []apiv1.VolumeMount{{Volume: vol.Name, Path: "/ro", ReadOnly: true}}})
	rw := newSandbox(t, mounting(vol.Name, "/rw"))
	if got := execOK(t, ro.ID, "cat /ro/f"); got != "shared" {
		t.Fatalf("read-only mount reads %q", got)
	}
	res, err := env.client.Exec(ctx, ro.ID, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo x > /ro/g"}})
	if err != nil || res.ExitCode == 0 || !strings.Contains(res.Stderr, "Read-only") {
		t.Fatalf("write to a read-only mount: %+v %v", res, err)
	}
	execOK(t, rw.ID, "echo later > /rw/g")
	if got := execOK(t, ro.ID, "cat /ro/g"); got != "later\n" {
		t.Fatalf("read-only mount reads %q of the other sandbox's write", got)
	}
	if !ro.VolumeMounts[0].ReadOnly {
		t.Fatalf("sandbox view: %+v", ro.VolumeMounts)
	}
}
