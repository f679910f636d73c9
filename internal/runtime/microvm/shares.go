package microvm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/guestinit"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/runtime"
)

// Persistent volumes reach a guest as virtio-9p shares. QEMU does not
// touch the host directory itself: it speaks 9p's proxy protocol over a
// socket to virtfs-proxy-helper, a process the backend starts per share
// (QEMU's -sandbox spawn=deny forbids QEMU to), which chroots into the
// directory and does each operation with the guest user's uid and gid.
// So a file a guest's user writes is owned on the host by that numeric
// uid, as it is when a gVisor sandbox writes it, and QEMU itself needs no
// privilege over the volume (it may run unprivileged). A read-only share
// is read-only twice: QEMU's fsdev refuses writes (readonly=on), and the
// helper serves a read-only bind mount of the volume, so a QEMU taken over
// by its guest cannot write through the helper either.
//
// While a 9p share is mounted QEMU refuses to migrate, so a guest with
// shares cannot be checkpointed (suspended, snapshotted, branched):
// Checkpoint says so with runtime.ErrUnsupported before stopping it.

// DefaultVirtFSHelper is where Debian's qemu-system-common installs it.
const DefaultVirtFSHelper = "/usr/lib/qemu/virtfs-proxy-helper"

// share is one persistent volume of a guest, as vm.json keeps it.
type share struct {
	Tag         string `json:"tag"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"read_only,omitempty"`
	// Export is the directory the helper serves: Source, or for a
	// read-only share a read-only bind mount of it in the guest's state
	// directory (unmounted by Destroy).
	Export string `json:"export"`
	// HelperPID is the helper's process, killed by Destroy.
	HelperPID int `json:"helper_pid,omitempty"`
}

// sharesOf turns a spec's mounts into shares, tagged in order.
func sharesOf(mounts []runtime.Mount) []share {
	var out []share
	for i, m := range mounts {
		out = append(out, share{Tag: "space" + strconv.Itoa(i), Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly, Export: m.Source})
	}
	return out
}

// guestMounts is what the guest's init mounts (through fw_cfg).
func guestMounts(shares []share) []guestinit.Share {
	var out []guestinit.Share
	for _, s := range shares {
		out = append(out, guestinit.Share{Tag: s.Tag, Path: s.Destination, ReadOnly: s.ReadOnly})
	}
	return out
}

// checkShares says why a guest cannot take mounts here, if it cannot.
func (r *Runtime) checkShares(id string, mounts []runtime.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	if _, err := os.Stat(r.cfg.VirtFSHelper); err != nil {
		return fmt.Errorf("start %s: persistent volume mounts: %w (no virtfs-proxy-helper on this node; scripts/install-deps.sh installs qemu-system-common)", id, runtime.ErrUnsupported)
	}
	if !r.cfg.Kernel.Has9p() {
		return fmt.Errorf("start %s: persistent volume mounts: %w (the guest kernel cache has no 9p modules; run scripts/microvm-kernel.sh again)", id, runtime.ErrUnsupported)
	}
	for _, m := range mounts {
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			return fmt.Errorf("start %s: volume for %s is not a directory", id, m.Destination)
		}
	}
	return nil
}

// startShares starts one helper per share, each born in the guest's
// cgroup, and returns QEMU's ends of their sockets (in share order). On
// error, what was started is undone by the caller's Destroy, which finds
// it in shares.
func (r *Runtime) startShares(dir string, shares []share, cg *cgroup, log *os.File) ([]*os.File, error) {
	var qemuEnds []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range qemuEnds {
			f.Close()
		}
		return nil, err
	}
	for i := range shares {
		s := &shares[i]
		if s.ReadOnly {
			export := filepath.Join(dir, "ro-"+s.Tag)
			if err := roBind(s.Source, export); err != nil {
				return fail(fmt.Errorf("share %s: %w", s.Destination, err))
			}
			s.Export = export
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("share %s: socketpair: %w", s.Destination, err))
		}
		helperEnd := os.NewFile(uintptr(fds[0]), "virtfs-helper")
		qemuEnd := os.NewFile(uintptr(fds[1]), "virtfs-qemu")
		// -n: stay in the foreground, this backend tracks it; -f 3:
		// the socket is its fd 3.
		cmd := exec.Command(r.cfg.VirtFSHelper, "-n", "-f", "3", "-p", s.Export)
		cmd.ExtraFiles = []*os.File{helperEnd}
		cmd.Stdout, cmd.Stderr = log, log
		// Its own session, like QEMU's: it lives as long as the guest,
		// across node restarts, and ends when QEMU's end of the socket
		// closes.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if fd, ok := cg.fd(); ok {
			defer fd.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
		}
		err = cmd.Start()
		helperEnd.Close()
		if err != nil {
			qemuEnd.Close()
			return fail(fmt.Errorf("share %s: virtfs-proxy-helper: %w", s.Destination, hostpath.Pathless(err)))
		}
		s.HelperPID = cmd.Process.Pid
		go func() { _ = cmd.Wait() }() // reap it whenever it ends
		if !cg.v2 {
			if err := cg.add(s.HelperPID); err != nil {
				qemuEnd.Close()
				return fail(err)
			}
		}
		qemuEnds = append(qemuEnds, qemuEnd)
	}
	return qemuEnds, nil
}

// shareArgs is QEMU's command line for the shares, whose sockets are the
// file descriptors fds (in share order).
func shareArgs(bus string, shares []share, fds []int) []string {
	var args []string
	for i, s := range shares {
		fsdev := fmt.Sprintf("proxy,id=fs%d,sock_fd=%d", i, fds[i])
		if s.ReadOnly {
			fsdev += ",readonly=on"
		}
		args = append(args, "-fsdev", fsdev, "-device", fmt.Sprintf("virtio-9p-%s,fsdev=fs%d,mount_tag=%s", bus, i, s.Tag))
	}
	return args
}

// stopShares kills the shares' helpers and unmounts the read-only
// exports. It runs before the state directory is removed: a bind mount
// left in it would be walked by the removal.
func (r *Runtime) stopShares(dir string, shares []share) error {
	var errs []error
	for _, s := range shares {
		if s.HelperPID > 0 && r.isOurHelper(s.HelperPID, s.Export) {
			_ = syscall.Kill(s.HelperPID, syscall.SIGKILL)
			waitGone(s.HelperPID, 5*time.Second)
		}
		if s.Export != s.Source && filepath.Dir(s.Export) == dir {
			if err := unix.Unmount(s.Export, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount the read-only export of %s: %w", s.Destination, err))
			}
		}
	}
	return errors.Join(errs...)
}

// isOurHelper reports whether pid is the helper serving export (the pid
// may have been reused since vm.json was written).
func (r *Runtime) isOurHelper(pid int, export string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	return len(args) > 0 && filepath.Base(args[0]) == filepath.Base(r.cfg.VirtFSHelper) && args[len(args)-1] == export
}

// waitGone waits until pid has exited (and been reaped, or is a zombie).
func waitGone(pid int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// roBind mounts src read-only at dst (made empty here), private, so the
// mount is not propagated anywhere else.
func roBind(src, dst string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return hostpath.Pathless(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the volume: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return fmt.Errorf("make the bind private: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return fmt.Errorf("make the bind read-only: %w", err)
	}
	return nil
}
