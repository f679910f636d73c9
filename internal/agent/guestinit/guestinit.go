// Package guestinit is the agent's early-init mode inside a microVM
// (internal/runtime/microvm): when the agent is the guest kernel's PID 1,
// started from the initramfs, it loads the early kernel modules, mounts the
// root ext4 image read-write with the agent at /.space/bin read-only,
// chroots into it, configures the network and hostname from the kernel
// command line and hands back the listener of the agent channel (a
// virtio-serial port or vsock), which the agent then serves as it does
// under gVisor.
package guestinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel command-line keys the host sets (microvm's qemu.go). Unknown
// key=value parameters without a dot reach init's environment too; the
// flag is read from there, the rest from /proc/cmdline.
const (
	FlagParam     = "spacevm"
	ParamIP       = "space_ip"       // address/prefix of eth0
	ParamGateway  = "space_gw"       // default route
	ParamMAC      = "space_mac"      // eth0's MAC, to find the device
	ParamHostname = "space_hostname" // initial hostname
	ParamChannel  = "space_chan"     // "serial:<port name>" or "vsock:<port>"
)

// FwCfgEnv is the fw_cfg item holding the agent's environment as JSON
// ({"env": ["K=V", ...], "shares": [...]}): it carries the boot token,
// which the kernel command line (readable by every guest process) must
// not, and the persistent volumes to mount (paths of any spelling, which
// JSON carries as they are).
const FwCfgEnv = "opt/space/env"

// Share is a persistent volume the host exports as a virtio-9p device
// with mount tag Tag, to be mounted at Path in the guest's root.
type Share struct {
	Tag      string `json:"tag"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// shareOptions: 9P2000.L as the host's helper speaks it, credentials
// of the guest's user on each request (access=user, the default of
// 9p2000.L, spelled out), no page cache, so a gVisor sandbox mounting
// the same volume and this guest see each other's writes at once.
const shareOptions = "trans=virtio,version=9p2000.L,access=user,cache=none,msize=262144"

// Paths inside the initramfs (microvm's initramfs.go writes them).
const (
	agentDir   = "/space/bin"
	modulesDir = "/space/modules"
	newRoot    = "/newroot"
	rootDevice = "/dev/vda"
	// The module lists (microvm's initramfs.go): every boot's, and 9p's.
	orderFile      = "order"
	shareOrderFile = "order-9p"
)

// MountPoint is where the agent's directory appears in the guest's root.
const MountPoint = "/.space/bin"

// Requested reports whether this process is a microVM guest's init: PID 1
// with the host's flag on the kernel command line.
func Requested() bool {
	return os.Getpid() == 1 && os.Getenv(FlagParam) == "1"
}

// Setup prepares the guest and returns the agent channel's listener. logf
// writes to the console, which the host keeps as the sandbox's log.
func Setup(logf func(string, ...any)) (net.Listener, error) {
	start := time.Now()
	for _, m := range []struct{ fstype, target string }{{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}} {
		if err := unix.Mount(m.fstype, m.target, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("mount %s: %w", m.target, err)
		}
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, err
	}
	params := parseCmdline(string(cmdline))
	if err := loadModules(orderFile, params, logf); err != nil {
		return nil, err
	}
	shares, err := readEnv()
	if err != nil {
		logf("guestinit: no environment from fw_cfg: %v", err)
	}
	if err := mountRoot(); err != nil {
		return nil, err
	}
	if len(shares) > 0 {
		if err := loadModules(shareOrderFile, params, logf); err != nil {
			return nil, err
		}
		if err := mountShares(shares); err != nil {
			return nil, err
		}
	}
	if err := enterRoot(); err != nil {
		return nil, err
	}
	if h := params[ParamHostname]; h != "" {
		if err := unix.Sethostname([]byte(h)); err != nil {
			return nil, fmt.Errorf("set hostname: %w", err)
		}
	}
	if err := configureNetwork(params); err != nil {
		return nil, err
	}
	ln, err := listen(params[ParamChannel], logf)
	if err != nil {
		return nil, err
	}
	logf("guestinit: ready in %s", time.Since(start).Round(time.Millisecond))
	return ln, nil
}

// PowerOff ends the guest. It reboots rather than powers off: QEMU runs
// with -no-reboot, so a reboot ends it on every machine type, while power
// off needs ACPI support the microvm machine may lack. PID 1 must not
// return: the kernel would panic.
func PowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {}
}

// parseCmdline splits the kernel command line into key=value pairs
// (quotes are not used by the host, so none are handled).
func parseCmdline(s string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// loadModules loads the initramfs's modules in the order the host
// resolved, each with its "<module>.<param>=" options from the command
// line (the kernel applies those only to built-in modules; for loadable
// ones it is modprobe's job, and there is no modprobe here).
func loadModules(list string, params map[string]string, logf func(string, ...any)) error {
	order, err := os.ReadFile(filepath.Join(modulesDir, list))
	if err != nil {
		return fmt.Errorf("module order: %w", err)
	}
	for _, file := range strings.Fields(string(order)) {
		name := strings.TrimSuffix(file, ".ko")
		var opts []string
		for k, v := range params {
			if p, ok := strings.CutPrefix(k, name+"."); ok {
				opts = append(opts, p+"="+v)
			}
		}
		path := filepath.Join(modulesDir, file)
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), strings.Join(opts, " "), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			// A device the machine does not have (virtio_pci on microvm)
			// still loads; a failure here is a broken module, but the
			// guest may yet come up without it, so log and go on.
			logf("guestinit: load module %s: %v", name, err)
		}
		_ = os.Remove(path) // loaded: free the initramfs's memory
	}
	return nil
}

// readEnv puts the host's environment for the agent into this process's
// and returns the shares to mount.
func readEnv() ([]Share, error) {
	path := "/sys/firmware/qemu_fw_cfg/by_name/" + FwCfgEnv + "/raw"
	var data []byte
	var err error
	for range 50 { // the fw_cfg driver may probe asynchronously
		if data, err = os.ReadFile(path); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Env    []string `json:"env"`
		Shares []Share  `json:"shares"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", FwCfgEnv, err)
	}
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	os.Unsetenv(FlagParam)
	return cfg.Shares, nil
}

// mountShares mounts each share at its path in the new root. The path is
// resolved in the guest's own filesystem: a symlink there leads only
// elsewhere in the guest. A share that cannot be mounted fails the boot:
// a sandbox that silently wrote to its root instead of its volume would
// lose the writes.
func mountShares(shares []Share) error {
	for _, s := range shares {
		if !filepath.IsAbs(s.Path) {
			return fmt.Errorf("share %s: mount path %q is not absolute", s.Tag, s.Path)
		}
		target := filepath.Join(newRoot, s.Path)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("share %s: mount point: %w", s.Path, err)
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if s.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount(s.Tag, target, "9p", flags, shareOptions); err != nil {
			return fmt.Errorf("mount share %s at %s: %w", s.Tag, s.Path, err)
		}
	}
	return nil
}

// mountRoot mounts the root image read-write at /newroot with the agent's
// directory bound read-only at MountPoint, and the kernel filesystems.
func mountRoot() error {
	if err := waitFor(rootDevice, 10*time.Second); err != nil {
		return err
	}
	// noinit_itable: no background zeroing of the inode tables that a
	// grown filesystem adds (GrowRoot). The disk grows sparse, so they
	// read as zeros already, and under emulation the zeroing would take
	// the guest's CPU for a while after every start.
	if err := unix.Mount(rootDevice, newRoot, "ext4", 0, "noinit_itable"); err != nil {
		return fmt.Errorf("mount root %s: %w", rootDevice, err)
	}
	target := newRoot + MountPoint
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("agent mount point: %w", err)
	}
	if err := unix.Mount(agentDir, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind agent: %w", err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("agent read-only: %w", err)
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if err := os.MkdirAll(newRoot+d, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, newRoot+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", d, err)
		}
	}
	for _, m := range []struct{ fstype, target, data string }{
		{"devpts", "/dev/pts", "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"tmpfs", "/dev/shm", "mode=1777"},
	} {
		if err := os.MkdirAll(newRoot+m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, newRoot+m.target, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, m.data); err != nil {
			return fmt.Errorf("mount %s: %w", m.target, err)
		}
	}
	// PTYs: /dev/ptmx must be the new devpts instance's.
	_ = os.Remove(newRoot + "/dev/ptmx")
	return os.Symlink("pts/ptmx", newRoot+"/dev/ptmx")
}

// enterRoot makes the mounted image this process's root.
func enterRoot() error {
	if err := unix.Chroot(newRoot); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

func waitFor(path string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s: %w", path, bound, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
