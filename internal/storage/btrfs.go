package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// subvolumeRootInode is the inode number of every btrfs subvolume's root
// directory (BTRFS_FIRST_FREE_OBJECTID); it is how a subvolume is told
// apart from a plain directory without an ioctl.
const subvolumeRootInode = 256

// btrfsBackend drives subvolumes through the btrfs CLI: slower than raw
// ioctls by a fork, but its error messages are the ones operators know.
type btrfsBackend struct {
	root   string
	quotas bool
	// simple is set when quotas are btrfs simple quotas (squota.go); limits
	// then subtract what a snapshot inherited from its source.
	simple    bool
	inherited inheritance
	logf      func(string, ...any)
	// qgroupState is the kernel's sysfs directory for this filesystem's
	// quota state ("" when the kernel has none).
	qgroupState string
	// rescanMu lets one caller rebuild inconsistent quota numbers while
	// the others wait for the result.
	rescanMu sync.Mutex
}

func newBtrfsBackend(ctx context.Context, root string, simpleQuotas bool, logf func(string, ...any)) *btrfsBackend {
	b := &btrfsBackend{root: root, logf: logf}
	sysfsDir := sysfsDir(ctx, root)
	enable := b.enableQuotas
	if !simpleQuotas {
		enable = b.enableFullQgroups
	}
	if err := enable(ctx, sysfsDir); err != nil {
		logf("storage: WARNING: cannot enable btrfs quotas (%v); sandbox disk limits will not be enforced", err)
		return b
	}
	b.quotas = true
	if b.simple {
		// Nothing below applies: simple quotas have no rescan and never
		// go inconsistent, and the kernel drops a deleted subvolume's
		// qgroup itself.
		return b
	}
	b.qgroupState = qgroupStateDir(sysfsDir)
	// Qgroups of subvolumes deleted before a crash linger; drop them.
	if _, err := run(ctx, "btrfs", "qgroup", "clear-stale", root); err != nil {
		if busy := strings.Count(err.Error(), "Device or resource busy"); busy > 0 {
			// The kernel's cleaner still drops those subvolumes' trees.
			logf("storage: %d stale qgroups are still being cleaned; a later start drops them", busy)
		} else {
			logf("storage: clearing stale qgroups: %v", err)
		}
	}
	if b.qgroupState != "" {
		// Dropping a deleted sandbox's tree must keep the numbers exact:
		// above this level the kernel skips the work and marks every
		// qgroup inconsistent instead, which switches accounting (and so
		// every limit) off until a rescan.
		_ = os.WriteFile(filepath.Join(b.qgroupState, "drop_subtree_threshold"), []byte(strconv.Itoa(maxTreeLevel)), 0o644)
	}
	// Enabling starts a rescan (-W waits for one without starting it), and
	// clear-stale may leave the numbers inconsistent.
	if _, err := run(ctx, "btrfs", "quota", "rescan", "-W", root); err != nil {
		logf("storage: waiting for quota rescan: %v", err)
	}
	if err := b.ensureAccounting(ctx); err != nil {
		logf("storage: WARNING: %v; sandbox disk limits may not hold until it succeeds", err)
	}
	return b
}

// maxTreeLevel is BTRFS_MAX_LEVEL: no tree is this deep, so a subtree
// threshold of it means "always account".
const maxTreeLevel = 8

// sysfsDir finds /sys/fs/btrfs/<fsid> for the filesystem at root ("" when
// it cannot).
func sysfsDir(ctx context.Context, root string) string {
	out, err := run(ctx, "btrfs", "filesystem", "show", root)
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(out), "uuid: ")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	return filepath.Join("/sys/fs/btrfs", fields[0])
}

// qgroupStateDir is the filesystem's sysfs qgroups directory, "" where the
// kernel does not say when it stopped accounting (kernels that stop on
// inconsistency all say so there).
func qgroupStateDir(sysfsDir string) string {
	if sysfsDir == "" {
		return ""
	}
	dir := filepath.Join(sysfsDir, "qgroups")
	if _, err := os.Stat(filepath.Join(dir, "inconsistent")); err != nil {
		return ""
	}
	return dir
}

// accountingInconsistent reports whether the kernel has marked the quota
// numbers inconsistent. While they are, btrfs stops accounting writes, so
// no limit trips.
func (b *btrfsBackend) accountingInconsistent() bool {
	if b.qgroupState == "" {
		return false
	}
	v, err := os.ReadFile(filepath.Join(b.qgroupState, "inconsistent"))
	return err == nil && strings.TrimSpace(string(v)) == "1"
}

// ensureAccounting rebuilds the quota numbers when the kernel has given up
// on them, so that a limit set afterwards holds.
func (b *btrfsBackend) ensureAccounting(ctx context.Context) error {
	if !b.accountingInconsistent() {
		return nil
	}
	b.rescanMu.Lock()
	defer b.rescanMu.Unlock()
	if !b.accountingInconsistent() {
		return nil // another caller's rescan fixed it
	}
	b.logf("storage: btrfs marked its quota numbers inconsistent (limits were not enforced); rescanning")
	// -w starts a rescan and waits for it; it fails when one is already
	// running, and -W then waits for that one.
	if _, err := run(ctx, "btrfs", "quota", "rescan", "-w", b.root); err != nil {
		if _, werr := run(ctx, "btrfs", "quota", "rescan", "-W", b.root); werr != nil {
			return fmt.Errorf("rescan quotas: %w", err)
		}
	}
	if b.accountingInconsistent() {
		return errors.New("quota numbers are still inconsistent after a rescan")
	}
	return nil
}

func (b *btrfsBackend) kind() string { return KindBtrfs }

func (b *btrfsBackend) create(p string) error {
	_, err := run(context.Background(), "btrfs", "subvolume", "create", p)
	return err
}

func (b *btrfsBackend) snapshot(src, dst string, readOnly bool) error {
	args := []string{"subvolume", "snapshot"}
	if readOnly {
		args = append(args, "-r")
	}
	if _, err := run(context.Background(), "btrfs", append(args, src, dst)...); err != nil {
		return err
	}
	if b.simple {
		b.inherited.recordSnapshot(src, dst)
	}
	return nil
}

func (b *btrfsBackend) setReadOnly(p string, ro bool) error {
	// -f: clearing ro on a received snapshot otherwise asks for consent.
	_, err := run(context.Background(), "btrfs", "property", "set", "-f", "-ts", p, "ro", strconv.FormatBool(ro))
	return err
}

func (b *btrfsBackend) remove(p string) error {
	if isSubvolume(p) {
		return b.removeSubvolume(p)
	}
	// A plain directory (e.g. sandboxes/<id>): delete the subvolumes in it,
	// then the rest.
	nested, err := nestedSubvolumes(p)
	if err != nil {
		return err
	}
	for _, sv := range nested {
		if err := b.removeSubvolume(sv); err != nil {
			return err
		}
	}
	return os.RemoveAll(p)
}

// removeSubvolume deletes a subvolume; when that fails because it holds
// nested subvolumes (ENOTEMPTY) or is read-only with nested ones, it makes
// it writable, deletes the nested ones depth-first and retries.
func (b *btrfsBackend) removeSubvolume(p string) error {
	ctx := context.Background()
	if _, err := run(ctx, "btrfs", "subvolume", "delete", p); err != nil {
		nested, werr := nestedSubvolumes(p)
		if werr != nil || len(nested) == 0 {
			return err
		}
		if err := b.setReadOnly(p, false); err != nil {
			return err
		}
		for _, sv := range nested {
			if err := b.removeSubvolume(sv); err != nil {
				return err
			}
		}
		if _, err := run(ctx, "btrfs", "subvolume", "delete", p); err != nil {
			return err
		}
	}
	b.inherited.forget(p)
	// The qgroup stays: the kernel removes it once the cleaner has dropped
	// the tree (clear-stale at the next Open does on older kernels).
	// Destroying it here would either be refused or, if it still showed
	// usage, mark every qgroup inconsistent and switch limits off.
	return nil
}

func (b *btrfsBackend) setLimit(p string, bytes int64) error {
	if !b.quotas {
		return ErrNoLimits
	}
	if !isSubvolume(p) {
		return fmt.Errorf("%s is not a volume", p)
	}
	if err := b.ensureAccounting(context.Background()); err != nil {
		return fmt.Errorf("limit %s: %w", p, err)
	}
	size := "none"
	if bytes > 0 && b.simple {
		// The qgroup is charged only for what the volume writes; what it
		// shares with its snapshot source counts towards the limit too.
		inherited, err := b.inherited.inheritedBytes(p)
		if err != nil {
			return fmt.Errorf("limit %s: %w", p, err)
		}
		bytes = max(bytes-inherited, 1)
	}
	if bytes > 0 {
		size = strconv.FormatInt(bytes, 10)
	}
	_, err := run(context.Background(), "btrfs", "qgroup", "limit", size, p)
	return err
}

func (b *btrfsBackend) usage(p string) (int64, error) {
	if !b.quotas || !isSubvolume(p) {
		return duBytes(p)
	}
	ctx := context.Background()
	id, err := rootID(ctx, p)
	if err != nil {
		return 0, err
	}
	// --sync commits first: qgroup numbers only move at transaction commit.
	out, err := run(ctx, "btrfs", "qgroup", "show", "--raw", "--sync", "-f", p)
	if err != nil {
		return 0, err
	}
	want := "0/" + strconv.FormatUint(id, 10)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[0] == want {
			return strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("qgroup %s not found in btrfs qgroup show output", want)
}

// rootID returns the subvolume (tree) id containing p.
func rootID(ctx context.Context, p string) (uint64, error) {
	out, err := run(ctx, "btrfs", "inspect-internal", "rootid", p)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse rootid of %s: %w", p, err)
	}
	return id, nil
}

func isSubvolume(p string) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Ino == subvolumeRootInode
}

// nestedSubvolumes returns the outermost subvolumes strictly below dir
// (their own nested ones are handled when they are removed).
func nestedSubvolumes(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == dir || !d.IsDir() {
			return nil
		}
		if isSubvolume(p) {
			found = append(found, p)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find nested volumes in %s: %w", dir, err)
	}
	return found, nil
}
