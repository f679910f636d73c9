package microvm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/hostpath"
)

// Each guest's QEMU runs as a user of its own, so a guest that takes over
// a device model holds neither root nor the user of another guest's QEMU
// (which it could then signal, ptrace, or whose files it could open). QEMU
// starts as root with three capabilities (qemuKeepCaps), opens everything
// it needs (drive, tap fd, sockets, logs, /dev/kvm, /dev/vhost-vsock),
// then -chroot's into the sandbox's state directory and -runas's to the
// guest's uid and gid before its main loop serves anything: before any
// QMP command is answered, before an incoming migration's state (the
// guest's, so untrusted) is read, and before a restored guest runs. (A
// cold boot's vCPUs are let go a moment before the drop, QEMU 7.2's
// vm_start preceding os_setup_post; what runs then is the node's own
// kernel and initramfs, the sandbox's code comes from its disk seconds
// later.)
//
// The uids and gids are [uidBase, uidBase+uidCount): 1879048192 to
// 1895825407 (0x70000000 up). That lies above systemd's range for
// container users (524288-1879048191), below 2^31 (uids past it trip tools
// that take them for signed), above the 16-bit range of ordinary and
// system users, and above the subuid ranges useradd hands out (100000 up,
// 65536 each) for the first 28000 users; a host must not give users or
// subuid ranges in it. The gid is the uid's number.
const (
	uidBase  = 0x70000000
	uidCount = 1 << 24
)

// uidLeaseDir holds a lease per uid in use: a symlink named by the uid
// that points to the sandbox's state directory. It is host-wide, not per
// StateDir, since several nodes on one host (tests, the e2e harness) draw
// from the one range; on tmpfs, so it goes with the guests at a reboot.
const uidLeaseDir = "/run/space/microvm-uids"

// leaseUID gives the sandbox whose state directory is dir a uid no other
// live sandbox holds: the first free one from a point derived from id. A
// lease whose directory is gone (a node that crashed before Destroy) is
// free again. A restore leases afresh: branches of one image run side by
// side, each under a uid of its own.
func leaseUID(id, dir string) (uint32, error) { return leaseUIDIn(uidLeaseDir, id, dir) }

func leaseUIDIn(leases, id, dir string) (uint32, error) {
	if err := os.MkdirAll(leases, 0o700); err != nil {
		return 0, fmt.Errorf("uid lease: %w", hostpath.Pathless(err))
	}
	// One allocation at a time on the host: taking over a stale lease
	// is a read and a remove that must not interleave with another's.
	lock, err := os.OpenFile(filepath.Join(leases, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("uid lease: %w", hostpath.Pathless(err))
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return 0, fmt.Errorf("uid lease: lock: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	start := h.Sum32() % uidCount
	for i := uint32(0); i < uidCount; i++ {
		uid := uidBase + (start+i)%uidCount
		path := filepath.Join(leases, strconv.FormatUint(uint64(uid), 10))
		err := os.Symlink(dir, path)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return 0, fmt.Errorf("uid lease: %w", hostpath.Pathless(err))
		}
		holder, err := os.Readlink(path)
		if err != nil {
			continue
		}
		if _, err := os.Stat(holder); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(path)
			if os.Symlink(dir, path) == nil {
				return uid, nil
			}
		}
	}
	return 0, errors.New("uid lease: every uid of the range is in use")
}

// releaseUID gives up dir's lease of uid (only its own: the uid may have
// gone to another sandbox once dir was removed).
func releaseUID(uid uint32, dir string) { releaseUIDIn(uidLeaseDir, uid, dir) }

func releaseUIDIn(leases string, uid uint32, dir string) {
	if uid == 0 {
		return
	}
	path := filepath.Join(leases, strconv.FormatUint(uint64(uid), 10))
	if holder, err := os.Readlink(path); err == nil && holder == dir {
		_ = os.Remove(path)
	}
}

// qemuKeepCaps is all QEMU keeps of root's capabilities, in its bounding
// set (so in what it has as root, before the drop): what -runas and
// -chroot need. Everything else it opens is root's own (0600 files of
// root, /dev/kvm), which takes no capability. After the drop its
// permitted and effective sets are empty; these three stay in the
// bounding set, where with no_new_privs (set by QEMU's seccomp) and no
// execve (its filter) they give nothing back.
var qemuKeepCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SYS_CHROOT}

// startBounded starts cmd from a thread whose capability bounding set is
// cut to keep; the child inherits it and can never regain the rest. The
// bounding set is per thread, so the thread is never unlocked: it ends
// with the goroutine rather than serve the node without capabilities.
func startBounded(cmd interface{ Start() error }, keep []uintptr) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := dropBoundingSet(keep); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

func dropBoundingSet(keep []uintptr) error {
	last := uintptr(unix.CAP_LAST_CAP)
	if data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			last = uintptr(n)
		}
	}
next:
	for c := uintptr(0); c <= last; c++ {
		for _, k := range keep {
			if c == k {
				continue next
			}
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// procCreds is what /proc/<pid>/task/<tid>/status says of a thread's
// credentials.
type procCreds struct {
	UID, GID       [4]uint32 // real, effective, saved, filesystem
	CapPrm, CapEff uint64
	CapBnd         uint64
	NoNewPrivs     bool
	Seccomp        int
}

func readCreds(statusFile string) (procCreds, error) {
	data, err := os.ReadFile(statusFile)
	if err != nil {
		return procCreds{}, hostpath.Pathless(err)
	}
	var c procCreds
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Uid", "Gid":
			if len(f) != 4 {
				return c, fmt.Errorf("%s: %q", k, v)
			}
			for i := range f {
				n, err := strconv.ParseUint(f[i], 10, 32)
				if err != nil {
					return c, fmt.Errorf("%s: %w", k, err)
				}
				if k == "Uid" {
					c.UID[i] = uint32(n)
				} else {
					c.GID[i] = uint32(n)
				}
			}
		case "CapPrm", "CapEff", "CapBnd":
			n, err := strconv.ParseUint(strings.Join(f, ""), 16, 64)
			if err != nil {
				return c, fmt.Errorf("%s: %w", k, err)
			}
			switch k {
			case "CapPrm":
				c.CapPrm = n
			case "CapEff":
				c.CapEff = n
			default:
				c.CapBnd = n
			}
		case "NoNewPrivs":
			c.NoNewPrivs = strings.Join(f, "") == "1"
		case "Seccomp":
			c.Seccomp, _ = strconv.Atoi(strings.Join(f, ""))
		}
	}
	return c, nil
}

// checkDropped verifies that every thread of QEMU pid runs as uid (and
// gid uid) with no capabilities, under its seccomp filter: a QEMU that
// ignored -runas (another build, another version) must not run a guest.
func checkDropped(pid int, uid uint32) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("QEMU's credentials: %w", hostpath.Pathless(err))
	}
	for _, t := range tasks {
		c, err := readCreds(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			return fmt.Errorf("QEMU's credentials: %w", err)
		}
		for i := 0; i < 4; i++ {
			if c.UID[i] != uid || c.GID[i] != uid {
				return fmt.Errorf("QEMU thread %s runs as uid %v gid %v, not %d", t.Name(), c.UID, c.GID, uid)
			}
		}
		if c.CapPrm != 0 || c.CapEff != 0 {
			return fmt.Errorf("QEMU thread %s kept capabilities %#x", t.Name(), c.CapPrm|c.CapEff)
		}
		if c.Seccomp != 2 {
			return fmt.Errorf("QEMU thread %s is not under its seccomp filter", t.Name())
		}
	}
	return nil
}
