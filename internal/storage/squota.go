package storage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Simple quotas (squota, Linux ≥ 6.7) charge an extent to the subvolume
// that wrote it, for as long as it lives, instead of to every subvolume
// that references it. Full qgroups must find every referencer of an extent
// whenever one changes: deleting a sandbox's snapshot of a template walks
// the back-references of every extent it shared, and after a few hundred
// create → delete cycles btrfs-cleaner kept a core busy for half an hour.
// Simple quotas do no walk, and the kernel drops a deleted subvolume's
// qgroup itself once its tree is gone. Debian's btrfs-progs 6.2 predates
// them, so they are switched on with the ioctl; limits and `qgroup show`
// work unchanged.

// BTRFS_IOC_QUOTA_CTL commands (include/uapi/linux/btrfs.h).
const (
	quotaCtlDisable      = 2
	quotaCtlEnableSimple = 4
)

// quotaCtlArgs is struct btrfs_ioctl_quota_ctl_args.
type quotaCtlArgs struct {
	cmd    uint64
	status uint64
}

// ioctlQuotaCtl is BTRFS_IOC_QUOTA_CTL, _IOWR(0x94, 40, 16 bytes).
const ioctlQuotaCtl = 3<<30 | 16<<16 | 0x94<<8 | 40

// ioctlSubvolGetFlags is BTRFS_IOC_SUBVOL_GETFLAGS, _IOR(0x94, 25, u64),
// and subvolReadOnly its BTRFS_SUBVOL_RDONLY bit.
const (
	ioctlSubvolGetFlags = 2<<30 | 8<<16 | 0x94<<8 | 25
	subvolReadOnly      = 1 << 1
)

// Quota modes, as the kernel names them in /sys/fs/btrfs/<fsid>/qgroups/mode.
const (
	quotaModeSimple = "squota"
	quotaModeFull   = "qgroup"
)

func quotaCtl(root string, cmd uint64) error {
	f, err := os.Open(root)
	if err != nil {
		return err
	}
	defer f.Close()
	args := quotaCtlArgs{cmd: cmd}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlQuotaCtl, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return errno
	}
	return nil
}

// quotaMode reads the filesystem's quota mode: "" while quotas are off (the
// kernel has no qgroups directory then).
func quotaMode(sysfsDir string) string {
	if sysfsDir == "" {
		return ""
	}
	v, err := os.ReadFile(filepath.Join(sysfsDir, "qgroups", "mode"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(v))
}

// enableQuotas turns quotas on in simple mode where the kernel has it, and
// moves a filesystem that full qgroups were enabled on (by an earlier
// version) to simple mode, keeping its limits. It falls back to full
// qgroups on kernels without simple quotas.
func (b *btrfsBackend) enableQuotas(ctx context.Context, sysfsDir string) error {
	switch mode := quotaMode(sysfsDir); mode {
	case quotaModeSimple:
		b.simple = true
		return nil
	case "":
		if err := quotaCtl(b.root, quotaCtlEnableSimple); err == nil {
			b.simple = true
			return nil
		} else {
			b.logf("storage: the kernel has no btrfs simple quotas (%v); using full qgroups, whose deletes cost the kernel more", err)
		}
		_, err := run(ctx, "btrfs", "quota", "enable", b.root)
		return err
	default:
		return b.switchToSimple(ctx)
	}
}

// enableFullQgroups turns on full qgroups (a no-op where quotas are on).
func (b *btrfsBackend) enableFullQgroups(ctx context.Context, sysfsDir string) error {
	if quotaMode(sysfsDir) == quotaModeSimple {
		b.simple = true
		return nil
	}
	_, err := run(ctx, "btrfs", "quota", "enable", b.root)
	return err
}

// switchToSimple disables full qgroups and enables simple quotas, then puts
// back the limits the qgroups had. Data written before the switch is
// charged to no one, so limits count what volumes write from now on; a
// crash before the limits are back leaves those volumes unlimited until
// they are next limited.
func (b *btrfsBackend) switchToSimple(ctx context.Context) error {
	limits, err := qgroupLimits(ctx, b.root)
	if err != nil {
		b.logf("storage: keeping full qgroups: %v", err)
		return nil
	}
	if err := quotaCtl(b.root, quotaCtlDisable); err != nil {
		b.logf("storage: keeping full qgroups: disable them: %v", err)
		return nil
	}
	if err := quotaCtl(b.root, quotaCtlEnableSimple); err != nil {
		b.logf("storage: the kernel has no btrfs simple quotas (%v); back to full qgroups", err)
		_, err := run(ctx, "btrfs", "quota", "enable", b.root)
		b.restoreLimits(ctx, limits)
		return err
	}
	b.simple = true
	b.restoreLimits(ctx, limits)
	b.logf("storage: switched btrfs quotas from full qgroups to simple quotas (deletes no longer walk back-references); %d limits kept", len(limits))
	return nil
}

func (b *btrfsBackend) restoreLimits(ctx context.Context, limits map[string]int64) {
	for id, max := range limits {
		if _, err := run(ctx, "btrfs", "qgroup", "limit", strconv.FormatInt(max, 10), id, b.root); err != nil {
			b.logf("storage: limit of qgroup %s after the quota switch: %v", id, err)
		}
	}
}

// qgroupLimits lists the subvolume qgroups that have a referenced-bytes
// limit, by qgroup id.
func qgroupLimits(ctx context.Context, root string) (map[string]int64, error) {
	out, err := run(ctx, "btrfs", "qgroup", "show", "--raw", "-r", root)
	if err != nil {
		return nil, fmt.Errorf("list qgroup limits: %w", err)
	}
	limits := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// qgroupid referenced exclusive max_referenced path
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "0/") {
			continue
		}
		if max, err := strconv.ParseInt(f[3], 10, 64); err == nil && max > 0 {
			limits[f[0]] = max
		}
	}
	return limits, sc.Err()
}

// inheritance remembers, under simple quotas, which volume each snapshot
// was taken of and how many bytes read-only sources hold, so that a limit
// can still mean "everything the volume sees": simple quotas charge a
// snapshot only for what it writes, the data it shares with its source
// stays charged to the source.
type inheritance struct {
	mu      sync.Mutex
	sources map[string]string      // snapshot path → source path
	sizes   map[string]sourceBytes // read-only source path → its size
}

// sourceBytes is a read-only source's size, valid while the subvolume at
// the path is the one measured (a rebuilt template has a new ctime).
type sourceBytes struct {
	ctime unix.Timespec
	bytes int64
}

func (in *inheritance) recordSnapshot(src, dst string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sources == nil {
		in.sources = map[string]string{}
	}
	in.sources[dst] = src
}

// forget drops what is known of a removed volume.
func (in *inheritance) forget(p string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.sources, p)
	delete(in.sizes, p)
}

// inheritedBytes is how much of what the volume at p sees it shares with
// the volume it was snapshotted from: 0 for a volume created empty, or one
// this process did not snapshot. It is asked once, when the new volume is
// limited, and forgets the source then.
func (in *inheritance) inheritedBytes(p string) (int64, error) {
	in.mu.Lock()
	src, ok := in.sources[p]
	delete(in.sources, p)
	in.mu.Unlock()
	if !ok {
		return 0, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		// The source is gone already; a new snapshot has written nothing
		// yet, so its own tree is what it shares.
		return duBytes(p)
	}
	readOnly := subvolumeReadOnly(src)
	if readOnly {
		in.mu.Lock()
		sz, ok := in.sizes[src]
		in.mu.Unlock()
		if ok && sz.ctime == st.Ctim {
			return sz.bytes, nil
		}
	}
	n, err := duBytes(src)
	if err != nil {
		return 0, fmt.Errorf("size of the source of %s: %w", p, err)
	}
	if readOnly {
		in.mu.Lock()
		if in.sizes == nil {
			in.sizes = map[string]sourceBytes{}
		}
		in.sizes[src] = sourceBytes{ctime: st.Ctim, bytes: n}
		in.mu.Unlock()
	}
	return n, nil
}

func subvolumeReadOnly(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var flags uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlSubvolGetFlags, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		return false
	}
	return flags&subvolReadOnly != 0
}
