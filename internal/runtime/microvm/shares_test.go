package microvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/space-platform/space/internal/runtime"
)

// A guest mounts one volume read-write and another read-only over 9p:
// writes reach the host with the writer's numeric owner (a chown too),
// the host's writes are seen at once, the read-only one refuses writes in
// the guest and from the helper's side, a checkpoint is refused without
// stopping the guest, and Destroy leaves no helper and no mount.
func TestVolumeShares(t *testing.T) {
	r := newRuntime(t)
	if !env.kernel.Has9p() {
		t.Skip("the guest kernel cache has no 9p modules (scripts/microvm-kernel.sh)")
	}
	rw := filepath.Join(env.dir, "vol-rw")
	ro := filepath.Join(env.dir, "vol-ro")
	for _, d := range []string{rw, ro} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "seed"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, "shares")
	spec.Mounts = []runtime.Mount{
		{Source: rw, Destination: "/mnt/data"},
		{Source: ro, Destination: "/srv/ro dir", ReadOnly: true},
	}
	c, boot := startVM(t, r, spec)
	t.Logf("boot with two shares to agent ready: %s", boot)
	token := "boot-shares"

	c.run(t, token, `echo 'u:x:1000:1000::/tmp:/bin/sh' >> /etc/passwd; echo 'u:x:1000:' >> /etc/group
		echo root-wrote > /mnt/data/by-root && chmod 1777 /mnt/data
		su -s /bin/sh u -c 'echo user-wrote > /mnt/data/by-user' || exit 1
		mkdir /mnt/data/sub && echo x > /mnt/data/sub/f && chown 1234:1235 /mnt/data/sub/f`)
	for name, want := range map[string]struct {
		content  string
		uid, gid uint32
	}{
		"by-root": {"root-wrote\n", 0, 0},
		"by-user": {"user-wrote\n", 1000, 1000},
		"sub/f":   {"x\n", 1234, 1235},
	} {
		p := filepath.Join(rw, name)
		data, err := os.ReadFile(p)
		if err != nil || string(data) != want.content {
			t.Errorf("host %s: %q, %v; want %q", name, data, err, want.content)
			continue
		}
		fi, _ := os.Stat(p)
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want.uid || st.Gid != want.gid {
			t.Errorf("host %s owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, want.uid, want.gid)
		}
	}
	if err := os.WriteFile(filepath.Join(rw, "from-host"), []byte("live\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.run(t, token, "cat /mnt/data/from-host; cat '/srv/ro dir/seed'"); got != "live\nfrom the host\n" {
		t.Errorf("guest reads %q", got)
	}
	if got := c.run(t, token, "echo no > '/srv/ro dir/w' 2>&1; rm '/srv/ro dir/seed' 2>&1; grep -c ' /srv/ro\\\\040dir 9p ro,' /proc/mounts"); !strings.Contains(got, "Read-only file system") || !strings.HasSuffix(got, "1\n") {
		t.Errorf("read-only share in the guest: %q", got)
	}
	if _, err := os.Stat(filepath.Join(ro, "seed")); err != nil {
		t.Errorf("the read-only volume lost its file: %v", err)
	}
	// The helper of the read-only share serves a read-only mount: even a
	// QEMU that ignored readonly=on could not write through it.
	var export string
	v, _ := r.lookup(spec.ID)
	for _, s := range v.conf.Shares {
		if s.ReadOnly {
			export = s.Export
		}
	}
	if err := os.WriteFile(filepath.Join(export, "w"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into the read-only export: %v, want EROFS", err)
	}

	// QEMU migrates no guest with a 9p share: refused up front, and the
	// guest runs on.
	err := r.Checkpoint(context.Background(), spec.ID, filepath.Join(env.dir, "shares-image"), true)
	if !errors.Is(err, runtime.ErrUnsupported) {
		t.Errorf("checkpoint with shares: %v, want ErrUnsupported", err)
	}
	if st, _ := r.State(context.Background(), spec.ID); st.Status != runtime.StatusRunning {
		t.Errorf("after the refused checkpoint the guest is %s", st.Status)
	}
	if got := c.run(t, token, "cat /mnt/data/by-root"); got != "root-wrote\n" {
		t.Errorf("after the refused checkpoint: %q", got)
	}

	helpers := map[int]bool{}
	for _, s := range v.conf.Shares {
		helpers[s.HelperPID] = true
	}
	c.close()
	if err := r.Destroy(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
	for pid := range helpers {
		if processRuns(pid) {
			t.Errorf("helper %d runs after destroy", pid)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), r.dir(spec.ID)) {
		t.Errorf("an export is still mounted after destroy")
	}
	if _, err := os.Stat(filepath.Join(ro, "seed")); err != nil {
		t.Errorf("destroy touched the read-only volume: %v", err)
	}
}
