package guestinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ext4ResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a mounted
// ext4 filesystem to a number of blocks.
const ext4ResizeFS = 0x40086610

// rootDiskName is rootDevice's kernel name: its size in 512-byte sectors
// is /sys/block/<name>/size, and its uevents' paths end in /block/<name>.
var rootDiskName = filepath.Base(rootDevice)

// GrowRoot keeps the root filesystem as large as its disk, for as long as
// the guest runs: the host grows a sandbox's disk to the sandbox's disk
// limit when it starts or is restored (QEMU's block_resize), the guest's
// kernel announces the new size with a change event of the block device,
// and ext4 grows online to fill it. It grows once at once (a cold boot may
// have missed the event) and then on every change event of the root disk.
// It never returns while it can listen; a guest whose kernel gives it no
// events is grown once.
func GrowRoot(logf func(string, ...any)) {
	sock, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err == nil {
		if err = unix.Bind(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
			unix.Close(sock)
		}
	}
	growRootOnce(logf)
	if err != nil {
		logf("guestinit: no block device events (%v): the root filesystem keeps its size", err)
		return
	}
	defer unix.Close(sock)
	buf := make([]byte, 16<<10)
	for {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
			continue
		}
		if err != nil {
			logf("guestinit: block device events: %v", err)
			return
		}
		// "change@/devices/.../block/vda\x00ACTION=change\x00...".
		head, _, _ := bytes.Cut(buf[:n], []byte{0})
		if bytes.HasPrefix(head, []byte("change@")) && bytes.HasSuffix(head, []byte("/block/"+rootDiskName)) {
			growRootOnce(logf)
		}
	}
}

// growRootOnce grows the root filesystem to its disk's size, if the disk
// is larger (a filesystem as large as its disk is left as it is: ext4
// takes a resize to its own size as nothing to do).
func growRootOnce(logf func(string, ...any)) {
	if err := growRoot(); err != nil {
		logf("guestinit: grow the root filesystem: %v", err)
	}
}

func growRoot() error {
	raw, err := os.ReadFile(filepath.Join("/sys/block", rootDiskName, "size"))
	if err != nil {
		return err
	}
	sectors, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return fmt.Errorf("disk size %q: %w", raw, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return err
	}
	if st.Bsize <= 0 {
		return fmt.Errorf("block size %d", st.Bsize)
	}
	blocks := sectors * 512 / uint64(st.Bsize)
	root, err := os.Open("/")
	if err != nil {
		return err
	}
	defer root.Close()
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, root.Fd(), ext4ResizeFS, uintptr(unsafe.Pointer(&blocks)))
	if errno != 0 {
		return fmt.Errorf("resize to %d blocks of %d bytes: %w", blocks, st.Bsize, errno)
	}
	return nil
}
