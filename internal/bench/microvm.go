package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/microvm"
)

// The runtimes bench measures (Config.Runtime).
const (
	runtimeGVisor  = runtime.GVisor
	runtimeMicroVM = runtime.MicroVM
)

// floorBound bounds one bare guest boot: minutes under TCG on a busy host,
// a second under KVM.
const floorBound = 3 * time.Minute

// CheckRuntime refuses a runtime bench cannot measure.
func CheckRuntime(name string) error {
	if name != runtimeGVisor && name != runtimeMicroVM {
		return fmt.Errorf("unknown runtime %q (gvisor or microvm)", name)
	}
	return nil
}

// floorTools finds QEMU, the guest kernel and the acceleration the
// server's guests run under, or says why the floors cannot be taken.
func (r *runner) floorTools() (qemu string, k microvm.Kernel, accel string, err error) {
	if r.cfg.QEMUPath != "" {
		qemu = r.cfg.QEMUPath
	} else if qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		return "", k, "", absent("no qemu-system-x86_64 on this host (--qemu)")
	}
	if r.cfg.KernelDir != "" {
		k, err = microvm.LoadKernel(r.cfg.KernelDir)
	} else {
		k, err = microvm.FindKernel()
	}
	if err != nil {
		return "", k, "", absent("guest kernel: %v (--microvm-kernel)", err)
	}
	// The server's guests say how they run; the floor runs the same way.
	accel = "tcg"
	if r.isolation == runtime.IsolationMicroVMKVM {
		accel = "kvm"
	}
	return qemu, k, accel, nil
}

// measureQEMUKernel times the guest kernel alone: QEMU's exec until an
// init of a few instructions prints a marker on the serial console
// (microvm.Probe, as serve's KVM probe), under the server's acceleration.
func (r *runner) measureQEMUKernel(ctx context.Context) (*Summary, error) {
	qemu, k, accel, err := r.floorTools()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "space-bench-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	return r.sample(ctx, KeyBaselineQEMUKernel, func(ctx context.Context, _ int) (time.Duration, error) {
		return microvm.Probe(ctx, qemu, k, accel, work, floorBound)
	})
}

// measureQEMUBoot times a bare QEMU boot of the guest a cold create
// boots: the same kernel, the initramfs the server made (with its agent),
// a copy of the template's root image, the backend's QEMU and kernel
// command lines; from QEMU's exec until the agent is up
// (microvm.BootFloor). No cgroup, network or QMP: the floor under a cold
// create, which the server's warm creates restore past.
func (r *runner) measureQEMUBoot(ctx context.Context) (*Summary, error) {
	qemu, k, accel, err := r.floorTools()
	if err != nil {
		return nil, err
	}
	image := filepath.Join(r.cfg.DataDir, "volumes", "templates", r.res.Template.ID+"."+runtimeMicroVM, microvm.ArtifactImage)
	if !fileExists(image) {
		return nil, absent("no microVM image of template %s under --data-dir %s (is it the server's?)", r.cfg.Template, r.cfg.DataDir)
	}
	initramfs, err := newestInitramfs(filepath.Join(r.cfg.DataDir, "microvm", "initramfs"))
	if err != nil {
		return nil, err
	}
	// The copy sits beside the volumes, where a reflink is possible.
	work, err := os.MkdirTemp(filepath.Join(r.cfg.DataDir, "volumes"), ".space-bench-floor-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "rootfs.img")
	if out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", image, root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copy the template's image: %w: %s", err, lastLines(string(out), 3))
	}
	limits := runtime.Limits{VCPUs: 1, MemoryMB: r.cfg.MemoryMB}
	r.res.note(KeyBaselineQEMUBoot, fmt.Sprintf("%d MiB guest, %s, to the agent's ready line", limits.MemoryMB, accel))
	return r.sample(ctx, KeyBaselineQEMUBoot, func(ctx context.Context, _ int) (time.Duration, error) {
		return microvm.BootFloor(ctx, qemu, k, accel, initramfs, root, filepath.Join(work, "guest"), limits, floorBound)
	})
}

// newestInitramfs is the initramfs the server made last (one per agent
// binary and kernel): the one its guests now boot.
func newestInitramfs(dir string) (string, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "initramfs-*.cpio"))
	if len(paths) == 0 {
		return "", absent("no guest initramfs under %s (has the server booted a microVM?)", dir)
	}
	mod := map[string]time.Time{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			mod[p] = fi.ModTime()
		}
	}
	sort.Slice(paths, func(i, j int) bool { return mod[paths[i]].After(mod[paths[j]]) })
	return paths[0], nil
}
