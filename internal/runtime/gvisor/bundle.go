package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/space-platform/space/internal/runtime"
)

// capabilities of the first process. They are those of an unprivileged
// container's root: enough for the agent to start processes as other users,
// chown files and bind low ports, all inside gVisor's kernel.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	"CAP_SYS_ADMIN",
}

const cpuPeriod = 100000

// agentMountPoint is where the agent binary's directory appears inside a
// sandbox. Images hold the agent's path, so it never changes.
const agentMountPoint = "/.space/bin"

// writeBundle writes the OCI bundle (config.json) for spec.
func (r *Runtime) writeBundle(spec runtime.Spec) error {
	// gVisor's gofer serves a host directory; a block image would need a
	// kernel of the sandbox's own to mount it.
	if spec.Rootfs.Kind != runtime.RootfsDir {
		return fmt.Errorf("gvisor: sandbox %s: root filesystem of kind %q: %w", spec.ID, spec.Rootfs.Kind, runtime.ErrUnsupported)
	}
	if spec.Network == nil || spec.Agent == "" {
		return fmt.Errorf("gvisor: sandbox %s: a spec needs a network slot and an agent", spec.ID)
	}
	dir := r.bundleDir(spec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bundle for %s: %w", spec.ID, err)
	}
	data, err := json.MarshalIndent(ociSpec(spec), "", " ")
	if err != nil {
		return fmt.Errorf("bundle for %s: %w", spec.ID, err)
	}
	tmp := filepath.Join(dir, "config.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("bundle for %s: %w", spec.ID, err)
	}
	return os.Rename(tmp, filepath.Join(dir, "config.json"))
}

func ociSpec(spec runtime.Spec) *specs.Spec {
	caps := &specs.LinuxCapabilities{
		Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
	}
	resources := &specs.LinuxResources{}
	if spec.Limits.MemoryMB > 0 {
		limit := int64(spec.Limits.MemoryMB) << 20
		resources.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if spec.Limits.VCPUs > 0 {
		quota := int64(spec.Limits.VCPUs) * cpuPeriod
		period := uint64(cpuPeriod)
		resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if spec.Limits.Pids > 0 {
		resources.Pids = &specs.LinuxPids{Limit: int64(spec.Limits.Pids)}
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	// The agent runs from its directory mounted read-only; an image holds
	// its path inside, so a restore mounts the directory of the same agent.
	mounts = append(mounts, specs.Mount{
		Destination: agentMountPoint, Type: "bind", Source: filepath.Dir(spec.Agent),
		Options: []string{"rbind", "ro"},
	})
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            []string{path.Join(agentMountPoint, filepath.Base(spec.Agent))},
			Env:             spec.Env,
			Cwd:             "/",
			Capabilities:    caps,
			NoNewPrivileges: false,
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}},
		},
		Root:     &specs.Root{Path: spec.Rootfs.Path},
		Hostname: spec.Hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: "/space/" + spec.ID,
			Resources:   resources,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: spec.Network.NetNSPath()},
			},
		},
	}
}

// Limits reads the limits a sandbox was started or restored under from its
// bundle: a node that adopts the sandbox after its own restart counts them
// as committed again.
func (r *Runtime) Limits(id string) (runtime.Limits, error) {
	data, err := os.ReadFile(filepath.Join(r.bundleDir(id), "config.json"))
	if err != nil {
		return runtime.Limits{}, fmt.Errorf("limits of %s: %w", id, err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return runtime.Limits{}, fmt.Errorf("limits of %s: %w", id, err)
	}
	return limitsOf(&s), nil
}

// limitsOf is the inverse of the resources ociSpec writes.
func limitsOf(s *specs.Spec) runtime.Limits {
	var l runtime.Limits
	if s.Linux == nil || s.Linux.Resources == nil {
		return l
	}
	res := s.Linux.Resources
	if res.Memory != nil && res.Memory.Limit != nil {
		l.MemoryMB = int(*res.Memory.Limit >> 20)
	}
	if res.CPU != nil && res.CPU.Quota != nil && res.CPU.Period != nil && *res.CPU.Period > 0 {
		l.VCPUs = int(*res.CPU.Quota / int64(*res.CPU.Period))
	}
	if res.Pids != nil {
		l.Pids = int(res.Pids.Limit)
	}
	return l
}
