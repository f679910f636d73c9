package storage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	gib             = int64(1) << 30
	minImageSize    = 4 * gib
	maxImageSize    = 200 * gib
	imageTempSuffix = ".creating"
)

// defaultImageSize is half the free space where the image will live,
// clamped to [4 GiB, 200 GiB]. The file is sparse, so this is a ceiling,
// not an allocation.
func defaultImageSize(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return minImageSize
	}
	size := int64(st.Bavail) * int64(st.Bsize) / 2
	return min(max(size, minImageSize), maxImageSize)
}

// createImage makes a sparse btrfs image at p.imagePath. It formats a
// temporary file and renames it into place, so a crash never leaves a
// half-formatted image that a restart would try to mount.
func (p *Pool) createImage(ctx context.Context, size int64) error {
	dir := filepath.Dir(p.imagePath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create image directory: %w", err)
	}
	if size <= 0 {
		size = defaultImageSize(dir)
	}
	tmp := p.imagePath + imageTempSuffix
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create image %s: %w", tmp, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("size image %s: %w", tmp, err)
	}
	if _, err := run(ctx, "mkfs.btrfs", "-q", "-L", "space-volumes", tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p.imagePath); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("install image: %w", err)
	}
	p.logf("storage: created sparse %d GiB btrfs image %s for volumes (root %s is not on btrfs)", size/gib, p.imagePath, p.root)
	return nil
}

// volumeMountOptions are the pool mount's: a setuid program or a device
// node that an image, a build or a sandbox leaves in a volume stays inert
// on the host. Not noexec: the Debian bootstrap runs the rootfs's
// programs in a chroot on the host (it allows devices again in its own
// mount namespace, template/debian.go).
const volumeMountOptions = "nosuid,nodev"

// mountImage mounts the image at p.root, reusing a loop device already
// attached to it (after a crash the device may outlive the mount) so
// restarts never pile up loop devices.
func (p *Pool) mountImage(ctx context.Context) error {
	devs, err := loopDevicesFor(ctx, p.imagePath)
	if err != nil {
		return err
	}
	if len(devs) > 0 {
		if _, err := run(ctx, "mount", "-t", "btrfs", "-o", volumeMountOptions, devs[0], p.root); err != nil {
			return err
		}
		p.logf("storage: mounted btrfs image %s (existing loop device %s) at %s", p.imagePath, devs[0], p.root)
		return nil
	}
	if _, err := run(ctx, "mount", "-t", "btrfs", "-o", "loop,"+volumeMountOptions, p.imagePath, p.root); err != nil {
		return err
	}
	p.logf("storage: mounted btrfs image %s at %s", p.imagePath, p.root)
	return nil
}

// hardenImageMount makes an image mount at p.root that an earlier version
// made without volumeMountOptions nosuid,nodev, in place: mounts outlive
// the process, and an upgrade must not wait for a reboot. A root on a
// btrfs of the operator's own is left as the operator mounted it.
func (p *Pool) hardenImageMount(ctx context.Context) error {
	src, ok := mountSource(p.root)
	if !ok {
		return nil
	}
	devs, err := loopDevicesFor(ctx, p.imagePath)
	if err != nil || !slices.Contains(devs, src) {
		return err
	}
	// A bind remount changes only the mount's own flags (atime ones are
	// kept), never the filesystem's options.
	if err := unix.Mount("", p.root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount %s %s: %w", p.root, volumeMountOptions, err)
	}
	return nil
}

// unmountImage undoes mountImage: unmount p.root if it is a mount of the
// image's loop device, then detach every loop device backed by the image.
func (p *Pool) unmountImage() error {
	ctx := context.Background()
	if _, err := os.Stat(p.imagePath); err != nil {
		return nil // no image: nothing of ours is mounted
	}
	devs, err := loopDevicesFor(ctx, p.imagePath)
	if err != nil {
		return err
	}
	if src, ok := mountSource(p.root); ok && slices.Contains(devs, src) {
		if _, err := run(ctx, "umount", p.root); err != nil {
			return err
		}
	}
	for _, dev := range devs {
		// mount -o loop sets autoclear, so the device may be gone already.
		if _, err := run(ctx, "losetup", "-d", dev); err != nil && !strings.Contains(err.Error(), "No such device") {
			if again, _ := loopDevicesFor(ctx, p.imagePath); slices.Contains(again, dev) {
				return err
			}
		}
	}
	return waitDetached(ctx, p.imagePath, 5*time.Second)
}

// waitDetached waits until no loop device is backed by image. Detaching is
// asynchronous in the kernel (autoclear releases the device after the last
// close), so a caller that re-attaches or checks at once could see it.
func waitDetached(ctx context.Context, image string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		devs, err := loopDevicesFor(ctx, image)
		if err != nil || len(devs) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loop devices %v of %s still attached after %s", devs, image, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loopDevicesFor lists loop devices whose backing file is image.
func loopDevicesFor(ctx context.Context, image string) ([]string, error) {
	out, err := run(ctx, "losetup", "-j", image)
	if err != nil {
		return nil, err
	}
	var devs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dev, _, ok := strings.Cut(sc.Text(), ":"); ok && strings.HasPrefix(dev, "/dev/") {
			devs = append(devs, dev)
		}
	}
	return devs, nil
}

// mountSource returns the source device of the mount whose mount point is
// exactly dir (the topmost one when stacked).
func mountSource(dir string) (string, bool) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	var src string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint options... - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				src, found = fields[i+2], true
			}
		}
	}
	return src, found
}

// UnmountUnder detaches every mount below dir, deepest first, so that dir
// can be removed: a volume image, or the empty network namespace runsc
// bind-mounts into its state directory.
func UnmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if p := unescapeMountinfo(f[4]); strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// unescapeMountinfo decodes the octal escapes (\040 for space) mountinfo
// uses in paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run executes a command and returns its stdout; the error carries the
// command line and its stderr, which is where btrfs and mount explain
// themselves.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}
