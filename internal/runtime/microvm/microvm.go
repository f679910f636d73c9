// Package microvm runs each sandbox in its own QEMU microVM: a guest kernel
// of its own between the sandbox and the host, with hardware virtualization
// (KVM) where the host offers it and emulation (TCG) where it does not.
//
// A guest boots Debian's kernel (scripts/microvm-kernel.sh) with an
// initramfs made here from the early modules and the agent binary; the
// agent is the guest's PID 1 (internal/agent/guestinit), mounts the raw
// ext4 root image (BuildImage, cloned per sandbox by reflink) and serves
// the node over a virtio-serial port on a unix socket, or vsock where the
// host has /dev/vhost-vsock. The lifecycle is QMP: stop and cont for
// pause and resume, a migration to a file for suspend and snapshots, a
// start with that file as incoming state for restore (any number of times
// from one file, side by side). QEMU runs in the sandbox's cgroup, as a
// user of its own and chrooted into the sandbox's state directory once it
// has opened its devices (user.go); its
// network is a tap device in the sandbox's namespace joined to the slot's
// veth.
//
// Per sandbox the backend keeps <StateDir>/<id>/: qmp.sock, agent.sock,
// console.log, qemu.pid, env.json (the agent's environment, passed by
// fw_cfg) and vm.json (how QEMU was started), so a new backend object finds
// running guests again.
package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/guestinit"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
)

// Config configures the backend.
type Config struct {
	// QEMU is the qemu-system-x86_64 binary; default from PATH.
	QEMU string
	// Kernel is the guest kernel (LoadKernel).
	Kernel Kernel
	// StateDir holds the sandboxes' directories and the initramfs cache.
	StateDir string
	// Accel is "auto", "kvm" or "tcg" (see Probe); "" is auto.
	Accel string
	// Machine is QEMU's machine type: "microvm" (default) or "q35".
	Machine string
	// VirtFSHelper is virtfs-proxy-helper, which serves persistent
	// volumes to guests (shares.go); default DefaultVirtFSHelper.
	VirtFSHelper string
	Logger       *slog.Logger
}

// The microVM takes a runtime.Spec with a RootfsBlock root filesystem: a
// raw ext4 image (a reflink clone of the template's ArtifactImage) that the
// guest mounts read-write. Its agent goes into the initramfs; its network
// slot's sandbox-side veth (slotLink) is where the tap is joined.
const slotLink = "eth0"

// ArtifactImage is the file PrepareTemplate writes into a template's
// artifact directory: the root image every sandbox of the template clones.
const ArtifactImage = "rootfs.img"

// agentPort is the virtio-serial port's name and the vsock port.
const (
	agentPortName = "space.agent"
	agentVsock    = 49983
)

// Runtime is the microVM backend.
type Runtime struct {
	cfg   Config
	accel string // "kvm" or "tcg", decided once
	log   *slog.Logger

	mu  sync.Mutex
	vms map[string]*vm
}

// vmConfig is how a guest's QEMU was started; it is kept with the sandbox
// and with every image saved from it, since a restore must present the
// same machine.
type vmConfig struct {
	Machine   string         `json:"machine"`
	Accel     string         `json:"accel"`
	Limits    runtime.Limits `json:"limits"`
	MAC       string         `json:"mac,omitempty"`
	Initramfs string         `json:"initramfs"`
	Kernel    string         `json:"kernel"`
	Cmdline   string         `json:"cmdline"`
	Vsock     uint32         `json:"vsock_cid,omitempty"` // 0: virtio-serial
	Rootfs    string         `json:"rootfs"`
	NetNSPath string         `json:"netns,omitempty"`
	Veth      string         `json:"veth,omitempty"`
	Shares    []share        `json:"shares,omitempty"`
	// UID is the uid and gid QEMU runs as (leaseUID); a sandbox's own,
	// never an image's: a restore leases one afresh.
	UID uint32 `json:"uid,omitempty"`
}

// vm is the backend's handle of one running QEMU.
type vm struct {
	id   string
	dir  string
	conf vmConfig
	pid  int
	cg   *cgroup
	// exited is closed when QEMU is gone; status then holds its wait
	// status when this process started it (-1 for an adopted one).
	exited chan struct{}
	status int

	qmpMu sync.Mutex
	qmp   *qmp
}

// New prepares the state directory and decides the acceleration (Probe).
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.QEMU == "" {
		p, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return nil, fmt.Errorf("microvm: %w (scripts/install-deps.sh installs it)", err)
		}
		cfg.QEMU = p
	}
	if cfg.Machine == "" {
		cfg.Machine = "microvm"
	}
	if cfg.VirtFSHelper == "" {
		cfg.VirtFSHelper = DefaultVirtFSHelper
	}
	if cfg.Kernel.Dir == "" {
		return nil, errors.New("microvm: no guest kernel configured")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, vms: map[string]*vm{}}
	accel, err := ChooseAccel(ctx, cfg.QEMU, cfg.Kernel, cfg.Accel, filepath.Join(cfg.StateDir, "probe"), r.log)
	if err != nil {
		return nil, err
	}
	r.accel = accel
	return r, nil
}

// Isolation says what kind of boundary this backend's sandboxes have.
func (r *Runtime) Isolation() string {
	if r.accel == "kvm" {
		return runtime.IsolationMicroVMKVM
	}
	return runtime.IsolationMicroVMTCG
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.ImageBuilder = (*Runtime)(nil)
	_ runtime.BlockRootfs  = (*Runtime)(nil)
)

// RootImage is the root image's file name in a template's artifact
// directory and in a sandbox's root volume.
func (r *Runtime) RootImage() string { return ArtifactImage }

// CloneRootImage clones a root image by reflink (CloneImage).
func (r *Runtime) CloneRootImage(ctx context.Context, src, dst string) error {
	return CloneImage(ctx, src, dst)
}

func (r *Runtime) dir(id string) string { return filepath.Join(r.cfg.StateDir, id) }

// Start boots a sandbox from spec.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	if err := checkSpec("start", spec); err != nil {
		return err
	}
	if err := r.checkShares(spec.ID, spec.Mounts); err != nil {
		return err
	}
	netns, link := slotOf(spec)
	initramfs, err := r.cfg.Kernel.Initramfs(spec.Agent, filepath.Join(r.cfg.StateDir, "initramfs"))
	if err != nil {
		return fmt.Errorf("start %s: %w", spec.ID, err)
	}
	conf := vmConfig{
		Machine: r.cfg.Machine, Accel: r.accel, Limits: spec.Limits,
		Initramfs: initramfs, Kernel: r.cfg.Kernel.Image(r.accel),
		Rootfs: spec.Rootfs.Path, NetNSPath: netns, Veth: link,
		Shares: sharesOf(spec.Mounts),
	}
	return r.launch(ctx, spec, conf, "")
}

// checkSpec refuses what the microVM cannot run, before anything is
// made: a directory root filesystem (a guest boots from a disk).
func checkSpec(what string, spec runtime.Spec) error {
	if spec.Rootfs.Kind != runtime.RootfsBlock {
		return fmt.Errorf("%s %s: a %q root filesystem: %w (the microVM boots from a raw ext4 image)", what, spec.ID, spec.Rootfs.Kind, runtime.ErrUnsupported)
	}
	return nil
}

// ErrSharesBlockCheckpoint is why a guest with persistent volumes cannot
// be checkpointed: QEMU migrates no guest with a 9p share mounted.
var ErrSharesBlockCheckpoint error = &runtime.UnsupportedError{Reason: "a microVM sandbox with persistent volumes mounted cannot be suspended with its memory, snapshotted or branched (its hypervisor cannot save a guest with a shared folder); a suspend that drops memory, or a gVisor sandbox, can"}

// slotOf is the network namespace and link a guest's tap joins, empty
// for a sandbox without a slot.
func slotOf(spec runtime.Spec) (netns, link string) {
	if spec.Network == nil {
		return "", ""
	}
	return spec.Network.NetNSPath(), slotLink
}

// PrepareTemplate makes the template's root image (ArtifactImage) of its
// finished root filesystem: sparse, with room for the sandbox's writes.
// The initramfs depends only on the agent binary and the kernel, and is
// made (once per agent) at the first start.
func (r *Runtime) PrepareTemplate(ctx context.Context, rootfsDir, outDir string) error {
	if err := BuildImage(ctx, rootfsDir, filepath.Join(outDir, ArtifactImage), 0); err != nil {
		return fmt.Errorf("prepare microvm template: %w", err)
	}
	return nil
}

// Restore starts a sandbox from an image Checkpoint saved, its memory as
// QEMU's incoming migration, on spec.Rootfs: a copy of the root image as
// it was at the checkpoint (the seam's contract; the node's volume
// snapshot, taken while the guest was stopped, carries the image). The same image may be restored into any number of
// sandboxes at once; each is re-keyed afterwards over its agent channel.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, imageDir string) error {
	if err := checkSpec("restore", spec); err != nil {
		return err
	}
	if len(spec.Mounts) > 0 {
		// No image of a guest with shares exists (Checkpoint refuses
		// them), and a guest restored from one without has no devices
		// to mount them from.
		return fmt.Errorf("restore %s: persistent volume mounts: %w (a microVM restored from an image cannot mount volumes)", spec.ID, runtime.ErrUnsupported)
	}
	data, err := os.ReadFile(filepath.Join(imageDir, "vm.json"))
	if err != nil {
		return fmt.Errorf("restore %s: image: %w", spec.ID, hostpath.Pathless(err))
	}
	var conf vmConfig
	if err := json.Unmarshal(data, &conf); err != nil {
		return fmt.Errorf("restore %s: image: %w", spec.ID, err)
	}
	if conf.Accel != r.accel {
		return fmt.Errorf("restore %s: the image was taken under %s, this node runs %s", spec.ID, conf.Accel, r.accel)
	}
	if _, err := os.Stat(spec.Rootfs.Path); err != nil {
		return fmt.Errorf("restore %s: root image: %w", spec.ID, hostpath.Pathless(err))
	}
	conf.Rootfs = spec.Rootfs.Path
	conf.NetNSPath, conf.Veth = slotOf(spec)
	return r.launch(ctx, spec, conf, filepath.Join(imageDir, "state"))
}

// launch starts QEMU in the sandbox's cgroup and waits until its guest
// runs. (Not with -S and a later cont: Debian's kernel does not come up on
// the microvm machine started that way.)
func (r *Runtime) launch(ctx context.Context, spec runtime.Spec, conf vmConfig, incoming string) (err error) {
	id := spec.ID
	if err := checkID(id); err != nil {
		return err
	}
	dir := r.dir(id)
	_ = r.Destroy(ctx, id) // leftovers of a crash
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("start %s: %w", id, hostpath.Pathless(err))
	}
	if conf.UID, err = leaseUID(id, dir); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("start %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = r.Destroy(context.WithoutCancel(ctx), id)
			releaseUID(conf.UID, dir)
		}
	}()
	envJSON, _ := json.Marshal(map[string]any{"env": spec.Env, "shares": guestMounts(conf.Shares)})
	if err := os.WriteFile(filepath.Join(dir, "env.json"), envJSON, 0o600); err != nil {
		return fmt.Errorf("start %s: %w", id, hostpath.Pathless(err))
	}
	var extra []*os.File
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	if conf.NetNSPath != "" {
		if conf.Veth == "" {
			conf.Veth = "eth0"
		}
		var want net.HardwareAddr
		if conf.MAC != "" {
			want, _ = net.ParseMAC(conf.MAC)
		}
		tap, mac, err := attachTap(conf.NetNSPath, conf.Veth, want)
		if err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		extra = append(extra, tap) // fd 3
		conf.MAC = mac.String()
	}
	// vsock where the host has it; a restored guest keeps the channel it
	// booted with (its devices must match), under a CID of its own.
	if (incoming == "" && vsockAvailable()) || conf.Vsock != 0 {
		conf.Vsock = cidFor(id)
	}
	if conf.Cmdline == "" { // a restore keeps the one its guest booted with
		conf.Cmdline = kernelCmdline(spec, conf)
	}
	cg, err := newCgroup(id, conf.Limits, qemuOverheadMB+kernelOverheadMB(conf.Kernel))
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	log, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		cg.remove()
		return fmt.Errorf("start %s: %w", id, hostpath.Pathless(err))
	}
	defer log.Close()
	args := qemuArgs(dir, conf)
	if len(conf.Shares) > 0 {
		// vm.json names the helpers and exports before they exist, so
		// a failure part way is undone by Destroy (the deferred one).
		ends, err := r.startShares(dir, conf.Shares, cg, log)
		if confJSON, jerr := json.MarshalIndent(conf, "", "  "); jerr == nil {
			_ = os.WriteFile(filepath.Join(dir, "vm.json"), confJSON, 0o600)
		}
		if err != nil {
			r.mu.Lock()
			r.vms[id] = &vm{id: id, dir: dir, conf: conf, cg: cg, exited: closedChan()}
			r.mu.Unlock()
			return fmt.Errorf("start %s: %w", id, err)
		}
		var fds []int
		for _, f := range ends {
			extra = append(extra, f)
			fds = append(fds, 2+len(extra))
		}
		args = append(args, shareArgs(busOf(conf), conf.Shares, fds)...)
	}
	if incoming != "" {
		f, err := os.Open(incoming)
		if err != nil {
			return fmt.Errorf("restore %s: image: %w", id, hostpath.Pathless(err))
		}
		extra = append(extra, f)
		args = append(args, "-incoming", "fd:"+strconv.Itoa(2+len(extra)))
	}
	confJSON, _ := json.MarshalIndent(conf, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "vm.json"), confJSON, 0o600); err != nil {
		return fmt.Errorf("start %s: %w", id, hostpath.Pathless(err))
	}
	cmd := exec.Command(r.cfg.QEMU, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = extra
	// Its own session: QEMU outlives this process (a node restart
	// adopts it) and must not get the node's terminal signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if fd, ok := cg.fd(); ok {
		// cgroup v2: QEMU is born in the sandbox's cgroup.
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	}
	if err := startBounded(cmd, qemuKeepCaps); err != nil {
		cg.remove()
		return fmt.Errorf("start %s: qemu: %w", id, err)
	}
	v := &vm{id: id, dir: dir, conf: conf, pid: cmd.Process.Pid, cg: cg, exited: make(chan struct{}), status: -1}
	go func() {
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			v.status = int(ws)
		}
		close(v.exited)
	}()
	if err := os.WriteFile(filepath.Join(dir, "qemu.pid"), []byte(strconv.Itoa(v.pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("start %s: %w", id, hostpath.Pathless(err))
	}
	r.mu.Lock()
	r.vms[id] = v
	r.mu.Unlock()
	if !cg.v2 {
		// v1 has no way to be born into a cgroup: move QEMU at once,
		// while it is still setting up and before the guest's memory is
		// touched (v1 charges a page to the cgroup that first touches it).
		if err := cg.add(v.pid); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	}
	q, err := r.qmpOf(ctx, v)
	if err != nil {
		return fmt.Errorf("start %s: %w%s", id, err, r.logTail(id))
	}
	// QEMU answers a command only from its main loop, which it enters
	// after the drop; a restored guest has not run yet.
	if _, err := q.status(ctx); err != nil {
		return fmt.Errorf("start %s: %w%s", id, err, r.logTail(id))
	}
	if err := checkDropped(v.pid, conf.UID); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	if incoming != "" {
		// The image was taken of a stopped guest, and the state it
		// carries says so: once loaded the guest waits for a cont.
		if err := waitStatus(ctx, q, "paused", 5*time.Minute); err != nil {
			return fmt.Errorf("restore %s: %w%s", id, err, r.logTail(id))
		}
		if _, err := q.execute(ctx, "cont", nil); err != nil {
			return fmt.Errorf("restore %s: %w", id, err)
		}
	}
	if err := waitStatus(ctx, q, "running", time.Minute); err != nil {
		return fmt.Errorf("start %s: %w%s", id, err, r.logTail(id))
	}
	if err := growDisk(ctx, q, conf.Rootfs, spec.Rootfs.Bytes); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	return nil
}

// growDisk grows a running guest's root disk to bytes when it is smaller:
// QEMU extends the (sparse) image and tells the guest, whose kernel
// announces the new size and whose init grows the root filesystem online
// (guestinit.GrowRoot). Growing after the start, rather than before, is
// what a restored guest needs: its kernel knows the disk's size from the
// image, and learns of a change only from the device.
func growDisk(ctx context.Context, q *qmp, image string, bytes int64) error {
	if bytes <= 0 {
		return nil
	}
	info, err := os.Stat(image)
	if err != nil {
		return fmt.Errorf("grow the disk: %w", hostpath.Pathless(err))
	}
	if info.Size() >= bytes {
		return nil
	}
	if _, err := q.execute(ctx, "block_resize", map[string]any{"device": "root", "size": bytes &^ 511}); err != nil {
		return fmt.Errorf("grow the disk to %d MiB: %w", bytes>>20, err)
	}
	return nil
}

// waitStatus polls QEMU's run state until it is want.
func waitStatus(ctx context.Context, q *qmp, want string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		st, err := q.status(ctx)
		if err != nil {
			return err
		}
		if st == want || (want == "paused" && st == "running") {
			return nil
		}
		if st == "guest-panicked" || st == "shutdown" || st == "internal-error" {
			return fmt.Errorf("guest is %s", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest still %s: %w", st, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kernelCmdline tells the guest's init what it needs (guestinit).
func kernelCmdline(spec runtime.Spec, conf vmConfig) string {
	parts := []string{
		"console=ttyS0", "panic=-1", "quiet", "loglevel=3",
		// The guest needs no mitigations against itself.
		"mitigations=off",
		// A reboot by triple fault: QEMU (-no-reboot) exits at once;
		// the default methods probe for a keyboard controller and ACPI
		// reset the microvm machine lacks, for tens of seconds under TCG.
		"reboot=t",
		guestinit.FlagParam + "=1",
	}
	if conf.Accel != "kvm" {
		// TCG gives the guest neither kvmclock nor, on microvm, an HPET
		// or ACPI PM timer: only the PIT to calibrate the TSC against,
		// and on a busy host that fails and the kernel hangs in its
		// timer setup. The emulated TSC runs at the host's rate, so tell
		// the guest what it is.
		if khz := hostTSCkHz(); khz > 0 {
			parts = append(parts, "tsc_early_khz="+strconv.Itoa(khz))
		}
	}
	if conf.Vsock != 0 {
		parts = append(parts, guestinit.ParamChannel+"=vsock:"+strconv.Itoa(agentVsock))
	} else {
		parts = append(parts, guestinit.ParamChannel+"=serial:"+agentPortName)
	}
	if spec.Hostname != "" {
		parts = append(parts, guestinit.ParamHostname+"="+spec.Hostname)
	}
	if conf.MAC != "" {
		parts = append(parts,
			guestinit.ParamIP+"="+network.SandboxAddr+"/30",
			guestinit.ParamGateway+"="+network.GatewayAddr,
			guestinit.ParamMAC+"="+conf.MAC)
	}
	return strings.Join(parts, " ")
}

// hostTSCkHz reads the host's TSC frequency as the kernel reports it.
func hostTSCkHz() int {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0
			}
			return int(mhz * 1000)
		}
	}
	return 0
}

// qemuArgs is QEMU's command line for a guest. The devices sit on
// virtio-mmio on the microvm machine and on PCI on q35. The microvm
// machine keeps its defaults (PIT, PIC, RTC): under TCG there is no
// kvmclock, and Debian's kernel hangs in its timer setup without them.
func qemuArgs(dir string, c vmConfig) []string {
	bus, machine := busOf(c), "microvm"
	if c.Machine == "q35" {
		machine = "q35"
	}
	accel := "tcg,tb-size=" + strconv.Itoa(tbSizeMB)
	cpu := "max"
	if c.Accel == "kvm" {
		accel, cpu = "kvm", "host"
	}
	vcpus := max(c.Limits.VCPUs, 1)
	mem := max(c.Limits.MemoryMB, 64)
	args := []string{
		"-name", "space-" + filepath.Base(dir),
		"-machine", machine, "-accel", accel, "-cpu", cpu,
		"-smp", strconv.Itoa(vcpus), "-m", strconv.Itoa(mem) + "M",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		// QEMU's own seccomp filter: a guest that takes over a device
		// model gets no new processes, no obsolete system calls and no
		// changes to its scheduling or limits. The set*id calls stay
		// allowed (elevateprivileges=deny kills QEMU at -runas's setuid,
		// for it installs the filter first); after the drop QEMU has no
		// capability left to make one succeed.
		"-sandbox", "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny",
		// Once its devices are open: the state directory as its root
		// (root's, 0700: it can open nothing there or anywhere else) and
		// the sandbox's own uid and gid, no supplementary groups.
		"-chroot", dir, "-runas", fmt.Sprintf("%d:%d", c.UID, c.UID),
		"-kernel", c.Kernel, "-initrd", c.Initramfs, "-append", c.Cmdline,
		"-chardev", "file,id=console,path=" + filepath.Join(dir, "console.log") + ",append=on",
		"-serial", "chardev:console",
		"-qmp", "unix:" + filepath.Join(dir, "qmp.sock") + ",server=on,wait=off",
		"-fw_cfg", "name=" + guestinit.FwCfgEnv + ",file=" + filepath.Join(dir, "env.json"),
		// auto-read-only=off: -drive's default reopens the image file
		// read-only by its path when a migration stops the guest's
		// writes, and read-write at the cont; after the drop QEMU
		// can no longer open it (a suspend's migration then fails).
		"-drive", "id=root,file=" + c.Rootfs + ",format=raw,if=none,cache=writeback,discard=unmap,auto-read-only=off",
		"-device", "virtio-blk-" + bus + ",drive=root",
	}
	if c.Vsock != 0 {
		args = append(args, "-device", fmt.Sprintf("vhost-vsock-%s,guest-cid=%d", bus, c.Vsock))
	} else {
		args = append(args,
			"-device", "virtio-serial-"+bus,
			"-chardev", "socket,id=agent,path="+filepath.Join(dir, "agent.sock")+",server=on,wait=off",
			"-device", "virtserialport,chardev=agent,name="+agentPortName)
	}
	if c.MAC != "" {
		nic := "virtio-net-" + bus + ",netdev=net0,mac=" + c.MAC
		if bus == "pci" {
			nic += ",romfile="
		}
		args = append(args, "-netdev", "tap,id=net0,fd=3", "-device", nic)
	}
	return args
}

// busOf is the suffix of virtio devices on the guest's machine.
func busOf(c vmConfig) string {
	if c.Machine == "q35" {
		return "pci"
	}
	return "device"
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// qmpOf returns the guest's QMP client, connecting on first use (after a
// backend restart, too).
func (r *Runtime) qmpOf(ctx context.Context, v *vm) (*qmp, error) {
	v.qmpMu.Lock()
	defer v.qmpMu.Unlock()
	if v.qmp != nil && v.qmp.connErr() == nil {
		return v.qmp, nil
	}
	if v.qmp != nil {
		v.qmp.Close()
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-v.exited:
			cancel()
		case <-dctx.Done():
		}
	}()
	q, err := dialQMP(dctx, filepath.Join(v.dir, "qmp.sock"))
	if err != nil {
		return nil, err
	}
	v.qmp = q
	return q, nil
}

func (r *Runtime) logTail(id string) string {
	var tail []string
	for _, f := range []string{"qemu.log", "console.log"} {
		data, _ := os.ReadFile(filepath.Join(r.dir(id), f))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		if s := strings.Join(lines, " | "); s != "" {
			tail = append(tail, s)
		}
	}
	if len(tail) == 0 {
		return ""
	}
	return ": " + strings.Join(tail, " | ")
}

// lookup returns the handle of a running guest, adopting one that a
// previous backend object started (its pid file and QMP socket are in its
// directory).
func (r *Runtime) lookup(id string) (*vm, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.vms[id]; ok {
		return v, nil
	}
	dir := r.dir(id)
	pidData, err := os.ReadFile(filepath.Join(dir, "qemu.pid"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, runtime.ErrNotFound)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidData)))
	var conf vmConfig
	if data, err := os.ReadFile(filepath.Join(dir, "vm.json")); err == nil {
		_ = json.Unmarshal(data, &conf)
	}
	if !r.isOurQEMU(pid, dir, conf.UID) {
		return nil, fmt.Errorf("%s: %w", id, runtime.ErrNotFound)
	}
	_, dirs := cgroupDirs(id)
	v := &vm{id: id, dir: dir, conf: conf, pid: pid, cg: &cgroup{dirs: dirs}, exited: make(chan struct{}), status: -1}
	go watchAdopted(v)
	r.vms[id] = v
	return v, nil
}

// isOurQEMU reports whether pid is this backend's QEMU of dir (a pid may
// have been reused since the file was written), running as the
// sandbox's uid (or still root, in the moment before its drop).
func (r *Runtime) isOurQEMU(pid int, dir string, uid uint32) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(data), filepath.Join(dir, "qmp.sock")) {
		return false
	}
	c, err := readCreds(fmt.Sprintf("/proc/%d/status", pid))
	return err == nil && (c.UID[1] == uid || c.UID[1] == 0)
}

// watchAdopted closes v.exited when a QEMU this process did not start
// exits: its pidfd becomes readable.
func watchAdopted(v *vm) {
	fd, err := unix.PidfdOpen(v.pid, 0)
	if err != nil {
		close(v.exited)
		return
	}
	defer unix.Close(fd)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
		if fds[0].Revents != 0 {
			break
		}
	}
	close(v.exited)
}

func (v *vm) alive() bool {
	select {
	case <-v.exited:
		return false
	default:
		return true
	}
}

// Pause stops the guest's vCPUs; its memory stays resident.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.simple(ctx, id, "pause", "stop")
}

// Resume lets a paused guest run again.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	return r.simple(ctx, id, "resume", "cont")
}

func (r *Runtime) simple(ctx context.Context, id, what, cmd string) error {
	v, err := r.lookup(id)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	q, err := r.qmpOf(ctx, v)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	if _, err := q.execute(ctx, cmd, nil); err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	return nil
}

// Checkpoint saves the guest into imageDir: its memory and device state
// (a migration to imageDir/state) and how QEMU ran it (vm.json). The disk
// stays the caller's: a copy of the root image taken while the guest is
// stopped (paused before, or suspended by this) agrees with the memory,
// and is what a restore runs on; the image holds no disk, so it may live
// on any filesystem. With leaveRunning the guest continues; otherwise
// QEMU quits and the sandbox is gone.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error {
	v, err := r.lookup(id)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if len(v.conf.Shares) > 0 {
		// Said before anything is stopped: QEMU would refuse the
		// migration only once it is under way.
		return fmt.Errorf("checkpoint %s: %w", id, ErrSharesBlockCheckpoint)
	}
	q, err := r.qmpOf(ctx, v)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	wasRunning := true
	if st, err := q.status(ctx); err == nil && st == "paused" {
		wasRunning = false
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, hostpath.Pathless(err))
	}
	// A stopped guest migrates in one pass, and stopping flushes its
	// disk to the image file, so a copy of it taken while the guest is
	// stopped holds every write the memory knows of.
	if _, err := q.execute(ctx, "stop", nil); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	fail := func(err error) error {
		if wasRunning && leaveRunning {
			_, _ = q.execute(context.WithoutCancel(ctx), "cont", nil)
		}
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := migrateToFile(ctx, q, filepath.Join(imageDir, "state")); err != nil {
		return fail(err)
	}
	conf := v.conf
	conf.Rootfs, conf.NetNSPath, conf.Veth, conf.UID = "", "", "", 0
	confJSON, _ := json.MarshalIndent(conf, "", "  ")
	if err := os.WriteFile(filepath.Join(imageDir, "vm.json"), confJSON, 0o600); err != nil {
		return fail(hostpath.Pathless(err))
	}
	if leaveRunning {
		if wasRunning {
			if _, err := q.execute(ctx, "cont", nil); err != nil {
				return fmt.Errorf("checkpoint %s: resume: %w", id, err)
			}
		}
		return nil
	}
	return r.Destroy(ctx, id)
}

// migrateToFile streams the stopped guest's state into path through a
// file descriptor handed to QEMU (QEMU 7.2 has no file: migration URI, and
// fd: needs no shell, unlike exec:).
func migrateToFile(ctx context.Context, q *qmp, path string) error {
	f, err := os.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return hostpath.Pathless(err)
	}
	defer os.Remove(path + ".tmp")
	_, err = q.executeWithFD(ctx, "getfd", map[string]any{"fdname": "migfile"}, int(f.Fd()))
	f.Close() // QEMU has its own copy
	if err != nil {
		return err
	}
	if _, err := q.execute(ctx, "migrate", map[string]any{"uri": "fd:migfile"}); err != nil {
		return err
	}
	for {
		raw, err := q.execute(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		_ = json.Unmarshal(raw, &st)
		switch st.Status {
		case "completed":
			if err := syncFile(path + ".tmp"); err != nil {
				return err
			}
			return hostpath.Pathless(os.Rename(path+".tmp", path))
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			_, _ = q.execute(context.WithoutCancel(ctx), "migrate_cancel", nil)
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return hostpath.Pathless(err)
	}
	defer f.Close()
	return hostpath.Pathless(f.Sync())
}

// Destroy ends the guest's QEMU and removes its tap, cgroup and state.
// Destroying a sandbox that does not exist is not an error.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	v, err := r.lookup(id)
	if err == nil {
		if v.alive() {
			_ = syscall.Kill(v.pid, syscall.SIGKILL)
			select {
			case <-v.exited:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("destroy %s: QEMU did not exit", id)
			}
		}
		v.qmpMu.Lock()
		if v.qmp != nil {
			v.qmp.Close()
			v.qmp = nil
		}
		v.qmpMu.Unlock()
		if v.conf.NetNSPath != "" {
			detachTap(v.conf.NetNSPath, v.conf.Veth)
		}
		if err := r.stopShares(v.dir, v.conf.Shares); err != nil {
			// Leave the directory: removing it would walk the export.
			return fmt.Errorf("destroy %s: %w", id, err)
		}
		r.mu.Lock()
		delete(r.vms, id)
		r.mu.Unlock()
	} else if data, err := os.ReadFile(filepath.Join(r.dir(id), "vm.json")); err == nil {
		// A start that died before QEMU ran may have left helpers and
		// read-only exports.
		var conf vmConfig
		if json.Unmarshal(data, &conf) == nil {
			if err := r.stopShares(r.dir(id), conf.Shares); err != nil {
				return fmt.Errorf("destroy %s: %w", id, err)
			}
		}
	}
	_, dirs := cgroupDirs(id)
	(&cgroup{dirs: dirs}).remove()
	// QEMU is gone (or was never found: killed while no backend object
	// watched it), so its uid is free; the record says which it was.
	var rec vmConfig
	if data, err := os.ReadFile(filepath.Join(r.dir(id), "vm.json")); err == nil && json.Unmarshal(data, &rec) == nil {
		releaseUID(rec.UID, r.dir(id))
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return fmt.Errorf("destroy %s: %w", id, hostpath.Pathless(err))
	}
	return nil
}

// State reports the guest's status, or runtime.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	v, err := r.lookup(id)
	if err != nil {
		return runtime.State{}, err
	}
	if !v.alive() {
		return runtime.State{Status: runtime.StatusStopped, PID: v.pid}, nil
	}
	q, err := r.qmpOf(ctx, v)
	if err != nil {
		return runtime.State{}, fmt.Errorf("state %s: %w", id, err)
	}
	st, err := q.status(ctx)
	if err != nil {
		return runtime.State{}, fmt.Errorf("state %s: %w", id, err)
	}
	switch st {
	case "running":
		return runtime.State{Status: runtime.StatusRunning, PID: v.pid}, nil
	case "paused", "postmigrate", "finish-migrate", "save-vm":
		return runtime.State{Status: runtime.StatusPaused, PID: v.pid}, nil
	case "prelaunch", "inmigrate":
		return runtime.State{Status: runtime.StatusCreated, PID: v.pid}, nil
	}
	return runtime.State{Status: runtime.StatusStopped, PID: v.pid}, nil
}

// List returns the ids of every sandbox with a live QEMU.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list: %w", hostpath.Pathless(err))
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || checkID(e.Name()) != nil {
			continue
		}
		if v, err := r.lookup(e.Name()); err == nil && v.alive() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// AgentStartTimeout bounds a new guest's boot, from QEMU's start to its
// agent answering: a kernel and an initramfs boot first, in about a second
// under KVM, and in tens of seconds under TCG on a busy host (twenty-odd
// seconds measured on two shared cores under load, BootFloor).
func (r *Runtime) AgentStartTimeout() time.Duration {
	if r.accel == "kvm" {
		return 30 * time.Second
	}
	return 2 * time.Minute
}

// RestoreKeepsBootLimits says a restored guest has the CPUs and memory it
// was booted with, whatever the restore's spec asks: they are part of the
// machine its migration state describes. The node boots template images
// at the size of the sandboxes it restores from them.
func (r *Runtime) RestoreKeepsBootLimits() bool { return true }

// Limits are those the guest was started with.
func (r *Runtime) Limits(id string) (runtime.Limits, error) {
	v, err := r.lookup(id)
	if err != nil {
		return runtime.Limits{}, err
	}
	return v.conf.Limits, nil
}

// Stats reads the sandbox's cgroup: QEMU's CPU time and memory, which
// include the guest's.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if _, err := r.lookup(id); err != nil {
		return runtime.Stats{}, err
	}
	return cgroupStats(id), nil
}

// exitStatus is why a guest's QEMU ended, in more detail than the seam's
// runtime.ExitReason.
type exitStatus struct {
	// Status is QEMU's wait status, -1 when this backend object did not
	// start it (an adopted guest).
	Status int
	// OOM: the kernel killed it for the cgroup's memory limit.
	OOM bool
}

// Wait blocks until the sandbox's QEMU exits (a guest power-off, a crash,
// an OOM kill of QEMU by the host, Destroy) and says why. An OOM inside
// the guest is its own kernel's business: the sandbox runs on.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitReason, error) {
	st, err := r.wait(ctx, id)
	if err != nil {
		return "", err
	}
	if st.OOM {
		return runtime.ExitOOM, nil
	}
	return runtime.ExitDied, nil
}

func (r *Runtime) wait(ctx context.Context, id string) (exitStatus, error) {
	v, err := r.lookup(id)
	if err != nil {
		return exitStatus{}, err
	}
	select {
	case <-v.exited:
	case <-ctx.Done():
		return exitStatus{}, ctx.Err()
	}
	return exitStatus{Status: v.status, OOM: oomKills(id) > 0}, nil
}

// DialAgent connects to the agent in the guest over its channel (the
// virtio-serial port's unix socket, or vsock) and runs the channel's
// handshake, so the conn is ready for HTTP/2. A handshake that gets no
// answer within handshakeAttempt is given up and the socket dialed again,
// until ctx ends: a reconnect is what makes QEMU tell the guest of its
// host afresh, should the guest have missed a hang-up and a reconnect
// that reached it together (a pause across both).
func (r *Runtime) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	v, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	for {
		var conn net.Conn
		if v.conf.Vsock != 0 {
			conn, err = dialVsock(v.conf.Vsock, agentVsock)
		} else {
			var d net.Dialer
			conn, err = d.DialContext(ctx, "unix", filepath.Join(v.dir, "agent.sock"))
		}
		if err != nil {
			return nil, fmt.Errorf("dial agent of %s: %w", id, hostpath.Pathless(err))
		}
		attempt := time.Now().Add(handshakeAttempt)
		if deadline.Before(attempt) {
			attempt = deadline
		}
		c, err := guestinit.ClientHandshake(conn, attempt)
		if err == nil {
			return c, nil
		}
		conn.Close()
		if !time.Now().Add(100 * time.Millisecond).Before(deadline) {
			return nil, fmt.Errorf("dial agent of %s: %w", id, err)
		}
	}
}

// handshakeAttempt bounds one handshake on one connection.
const handshakeAttempt = 2 * time.Second

// AgentDialTimeout is how long a caller of DialAgent should allow: room
// for a handshake that goes unanswered and the redial after it, and for
// the guest's session that missed a hang-up to end (about a second).
func (r *Runtime) AgentDialTimeout() time.Duration { return 3*handshakeAttempt + time.Second }

// Close lets go of the guests without stopping them: it closes their
// QMP connections (QEMU serves one client at a time, so a backend object
// that replaces this one, after a node restart, could not reach them
// otherwise).
func (r *Runtime) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, v := range r.vms {
		v.qmpMu.Lock()
		if v.qmp != nil {
			v.qmp.Close()
			v.qmp = nil
		}
		v.qmpMu.Unlock()
		delete(r.vms, id)
	}
	return nil
}

// Quiesce has nothing to wait for: every lifecycle step is a QMP command
// of this process, none outlives it.
func (r *Runtime) Quiesce(ctx context.Context, id string) error { return nil }

// cidFor gives a guest its vsock context id: 3 and up (0-2 are
// reserved), from the sandbox id, so a node restart finds the same one.
func cidFor(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return 3 + h.Sum32()%(1<<30)
}

func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." || id == "probe" || id == "initramfs" {
		return fmt.Errorf("invalid sandbox id %q", id)
	}
	return nil
}
