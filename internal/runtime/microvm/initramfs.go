package microvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Kernel is a guest kernel as scripts/microvm-kernel.sh unpacks it:
// <dir>/vmlinuz, <dir>/vmlinux (the same kernel decompressed, when the
// script could extract it), <dir>/version and <dir>/modules/ (modules.dep
// and the module files a guest may load early).
type Kernel struct {
	Dir     string
	Version string
}

// LoadKernel checks the kernel directory (normally .tools/microvm/current).
func LoadKernel(dir string) (Kernel, error) {
	v, err := os.ReadFile(filepath.Join(dir, "version"))
	if err != nil {
		return Kernel{}, fmt.Errorf("microvm guest kernel (run scripts/microvm-kernel.sh): %w", err)
	}
	k := Kernel{Dir: dir, Version: strings.TrimSpace(string(v))}
	if _, err := os.Stat(k.Vmlinuz()); err != nil {
		return Kernel{}, fmt.Errorf("microvm guest kernel %s: %w", k.Version, err)
	}
	return k, nil
}

// FindKernel loads the guest kernel scripts/microvm-kernel.sh unpacks:
// $SPACE_MICROVM_KERNEL if set, else .tools/microvm/current beside the
// running binary or in the working directory or one above it.
func FindKernel() (Kernel, error) {
	var dirs []string
	if dir := os.Getenv("SPACE_MICROVM_KERNEL"); dir != "" {
		dirs = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			dirs = append(dirs, filepath.Join(filepath.Dir(exe), ".tools", "microvm", "current"))
		}
		if wd, err := os.Getwd(); err == nil {
			for dir := wd; dir != "/"; dir = filepath.Dir(dir) {
				dirs = append(dirs, filepath.Join(dir, ".tools", "microvm", "current"))
			}
		}
	}
	err := errors.New("not found (.tools/microvm/current, or $SPACE_MICROVM_KERNEL)")
	for _, dir := range dirs {
		var k Kernel
		if k, err = LoadKernel(dir); err == nil {
			return k, nil
		}
	}
	return Kernel{}, err
}

// Vmlinuz is the kernel as Debian ships it, compressed.
func (k Kernel) Vmlinuz() string { return filepath.Join(k.Dir, "vmlinuz") }

// Image is the kernel image QEMU boots under accel. Under TCG it is
// vmlinux where there is one: QEMU boots that ELF straight into the
// kernel's PVH entry, where an emulated guest spends about three seconds
// of every cold boot decompressing vmlinuz. The price is memory: QEMU
// keeps a copy of what it loaded (about 50 MiB more than of vmlinuz, see
// kernelOverheadMB), worth it only where decompression is slow; under
// KVM it takes a tenth of a second, and guests boot vmlinuz.
func (k Kernel) Image(accel string) string {
	if accel == "tcg" {
		vmlinux := filepath.Join(k.Dir, "vmlinux")
		if _, err := os.Stat(vmlinux); err == nil {
			return vmlinux
		}
	}
	return k.Vmlinuz()
}

func (k Kernel) modulesDir() string { return filepath.Join(k.Dir, "modules") }

// earlyModules must be loaded before the root filesystem can be mounted
// and the agent reached: Debian builds all of them as modules. ext4's
// checksum driver is a soft dependency (modules.softdep), which
// modules.dep does not list, so it is named here; qemu_fw_cfg carries the
// sandbox's environment (see guestinit).
var earlyModules = []string{
	"virtio_mmio", "virtio_pci", "virtio_blk", "virtio_console", "virtio_net",
	"crc32c_generic", "ext4", "qemu_fw_cfg",
	"vmw_vsock_virtio_transport",
}

// shareModules are 9p over virtio, for persistent volumes (shares.go).
// They go into the initramfs when the kernel cache has them, as a list of
// their own: only a guest that mounts a share loads them (each module
// costs boot time under TCG).
var shareModules = []string{"9pnet_virtio", "9p"}

// Has9p reports whether the kernel cache holds the 9p modules (a cache
// made before they were on scripts/microvm-kernel.sh's list does not).
func (k Kernel) Has9p() bool {
	mods, err := k.resolve(shareModules)
	if err != nil {
		return false
	}
	for _, m := range mods {
		if _, err := os.Stat(filepath.Join(k.modulesDir(), m)); err != nil {
			return false
		}
	}
	return true
}

func (k Kernel) resolve(names []string) ([]string, error) {
	depFile, err := os.ReadFile(filepath.Join(k.modulesDir(), "modules.dep"))
	if err != nil {
		return nil, err
	}
	return resolveModules(bytes.NewReader(depFile), names)
}

// moduleName is a module's name as modprobe spells it: the file's base
// name without .ko, dashes as underscores.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// resolveModules returns the module files (relative to the modules
// directory) that loading names needs, each after its dependencies, from
// modules.dep.
func resolveModules(modulesDep io.Reader, names []string) ([]string, error) {
	deps := map[string][]string{} // path → dependency paths
	byName := map[string]string{} // name → path
	sc := bufio.NewScanner(modulesDep)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[moduleName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules.dep: %w", err)
	}
	var order []string
	seen := map[string]bool{}
	var visit func(path string, depth int) error
	visit = func(path string, depth int) error {
		if seen[path] {
			return nil
		}
		if depth > 64 {
			return fmt.Errorf("module dependency loop at %s", path)
		}
		seen[path] = true
		// modules.dep lists each module's whole dependency closure, the
		// deepest last; visiting them first, recursively, puts every
		// module after what it needs.
		for i := len(deps[path]) - 1; i >= 0; i-- {
			if err := visit(deps[path][i], depth+1); err != nil {
				return err
			}
		}
		order = append(order, path)
		return nil
	}
	for _, n := range names {
		path, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			// Built into the kernel, or absent: the guest will find out
			// when the device does not appear, so say which.
			return nil, fmt.Errorf("module %s is not in modules.dep", n)
		}
		if err := visit(path, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Paths inside the initramfs, shared with package guestinit.
const (
	initramfsAgent   = "space/bin/space-agent"
	initramfsModules = "space/modules"
	// The module lists: loaded at every boot, and for shares.
	initramfsOrder      = "order"
	initramfsShareOrder = "order-9p"
)

// Initramfs returns the path of an initramfs holding the kernel's early
// modules and the agent binary as /init, building it under cacheDir if
// no archive of the same content is there yet (the name is a hash of what
// goes in, so an agent upgrade makes a new one and a rebuild is free).
func (k Kernel) Initramfs(agentBinary, cacheDir string) (string, error) {
	mods, err := k.resolve(earlyModules)
	if err != nil {
		return "", fmt.Errorf("initramfs for kernel %s: %w", k.Version, err)
	}
	var shareMods []string
	if k.Has9p() {
		all, _ := k.resolve(shareModules)
		early := map[string]bool{}
		for _, m := range mods {
			early[m] = true
		}
		for _, m := range all {
			if !early[m] {
				shareMods = append(shareMods, m)
			}
		}
	}
	agent, err := os.ReadFile(agentBinary)
	if err != nil {
		return "", fmt.Errorf("initramfs: agent: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "space initramfs v1\nkernel %s\n", k.Version)
	agentSum := sha256.Sum256(agent)
	fmt.Fprintf(h, "agent %x\n", agentSum)
	for _, m := range mods {
		fmt.Fprintf(h, "module %s\n", m)
	}
	for _, m := range shareMods {
		fmt.Fprintf(h, "share module %s\n", m)
	}
	path := filepath.Join(cacheDir, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:24]+".cpio")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	tmp, err := os.CreateTemp(cacheDir, ".initramfs-*")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	c := newCPIOWriter(bw)
	for _, d := range []string{"dev", "proc", "sys", "newroot", "space", "space/bin", initramfsModules} {
		c.Dir(d, 0o755)
	}
	// The kernel opens /dev/console for init's stdio before devtmpfs is
	// mounted, so the node must be in the archive.
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File(initramfsAgent, 0o755, agent)
	c.Symlink("init", initramfsAgent)
	for _, list := range []struct {
		file string
		mods []string
	}{{initramfsOrder, mods}, {initramfsShareOrder, shareMods}} {
		var order strings.Builder
		for _, m := range list.mods {
			data, err := os.ReadFile(filepath.Join(k.modulesDir(), m))
			if err != nil {
				return "", fmt.Errorf("initramfs: module %s (is it in scripts/microvm-kernel.sh's list?): %w", moduleName(m), err)
			}
			name := moduleName(m) + ".ko"
			c.File(initramfsModules+"/"+name, 0o644, data)
			order.WriteString(name + "\n")
		}
		c.File(initramfsModules+"/"+list.file, 0o644, []byte(order.String()))
	}
	if err := c.Close(); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := errors.Join(bw.Flush(), tmp.Close()); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return path, nil
}
