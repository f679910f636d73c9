package microvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/cgroupfs"
)

// The QEMU process of a sandbox runs in the cgroup /space/<id>, the name
// gVisor's sandboxes use, so the node's figures and sweeps find both: on a
// cgroup v2 host /sys/fs/cgroup/space/<id>; on a v1 (or hybrid) host in
// the memory, cpu and pids hierarchies, and in the hybrid's controller-less
// v2 tree too (see gvisor/unified.go for why).
const cgroupFS = "/sys/fs/cgroup"

// qemuOverheadMB is what QEMU itself needs beside the guest's memory and
// its kernel image (kernelOverheadMB):
// its code, device emulation, TCG's translation cache (32 MiB by
// default in system mode on 7.2, bounded with tb-size below) and buffers.
const qemuOverheadMB = 160

// tbSizeMB bounds TCG's translation block cache, part of the overhead.
const tbSizeMB = 64

type cgroup struct {
	v2   bool
	dirs []string // every directory made for the sandbox
}

func cgroupDirs(id string) (v2 bool, dirs []string) {
	if cgroupfs.IsV2(cgroupFS) {
		return true, []string{filepath.Join(cgroupFS, "space", id)}
	}
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		if _, err := os.Stat(filepath.Join(cgroupFS, c)); err == nil {
			dirs = append(dirs, filepath.Join(cgroupFS, c, "space", id))
		}
	}
	if cgroupfs.IsV2(filepath.Join(cgroupFS, "unified")) {
		dirs = append(dirs, filepath.Join(cgroupFS, "unified", "space", id))
	}
	return false, dirs
}

// kernelOverheadMB is what booting kernel image adds to QEMU's memory:
// QEMU keeps a copy of the image it loaded for a reset, and maps the
// file, both charged to the sandbox's cgroup; about the file's size.
func kernelOverheadMB(image string) int {
	fi, err := os.Stat(image)
	if err != nil {
		return 0 // QEMU fails to load it, and says so
	}
	return int((fi.Size() + 1<<20 - 1) >> 20)
}

// newCgroup makes the sandbox's cgroup with its limits: memory = guest
// memory + overheadMB for QEMU, CPU = vCPUs, pids.
func newCgroup(id string, l runtime.Limits, overheadMB int) (*cgroup, error) {
	v2, dirs := cgroupDirs(id)
	cg := &cgroup{v2: v2, dirs: dirs}
	if v2 {
		// The controllers must be enabled on the way down.
		parent := filepath.Join(cgroupFS, "space")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", hostpath.Pathless(err))
		}
		for _, d := range []string{cgroupFS, parent} {
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +cpu +pids"), 0o644)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("cgroup: %w", hostpath.Pathless(err))
		}
	}
	mem := int64(l.MemoryMB+overheadMB) << 20
	var writes [][2]string
	if v2 {
		d := dirs[0]
		writes = append(writes, [2]string{filepath.Join(d, "memory.max"), strconv.FormatInt(mem, 10)},
			[2]string{filepath.Join(d, "memory.swap.max"), "0"})
		if l.VCPUs > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "cpu.max"), fmt.Sprintf("%d 100000", l.VCPUs*100000)})
		}
		if l.Pids > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "pids.max"), strconv.Itoa(l.Pids)})
		}
	} else {
		for _, d := range dirs {
			switch filepath.Base(filepath.Dir(filepath.Dir(d))) {
			case "memory":
				writes = append(writes, [2]string{filepath.Join(d, "memory.limit_in_bytes"), strconv.FormatInt(mem, 10)})
			case "cpu":
				if l.VCPUs > 0 {
					writes = append(writes, [2]string{filepath.Join(d, "cpu.cfs_period_us"), "100000"},
						[2]string{filepath.Join(d, "cpu.cfs_quota_us"), strconv.Itoa(l.VCPUs * 100000)})
				}
			case "pids":
				if l.Pids > 0 {
					writes = append(writes, [2]string{filepath.Join(d, "pids.max"), strconv.Itoa(l.Pids)})
				}
			}
		}
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0o644); err != nil && !(errors.Is(err, os.ErrNotExist) && strings.HasSuffix(w[0], "swap.max")) {
			cg.remove()
			return nil, fmt.Errorf("cgroup limit %s: %w", filepath.Base(w[0]), hostpath.Pathless(err))
		}
	}
	return cg, nil
}

// fd opens the v2 cgroup's directory, for clone's CLONE_INTO_CGROUP.
func (cg *cgroup) fd() (*os.File, bool) {
	if !cg.v2 {
		return nil, false
	}
	f, err := os.Open(cg.dirs[0])
	if err != nil {
		return nil, false
	}
	return f, true
}

// add moves a process (QEMU, before its guest runs) into the cgroup.
func (cg *cgroup) add(pid int) error {
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("cgroup: move QEMU: %w", hostpath.Pathless(err))
		}
	}
	return nil
}

// remove deletes the cgroup's directories (empty once QEMU is gone).
func (cg *cgroup) remove() {
	for _, d := range cg.dirs {
		_ = os.Remove(d)
	}
}

// oomKills reads how often the kernel killed a process of the sandbox's
// cgroup for its memory limit (v2 memory.events, v1 memory.oom_control).
func oomKills(id string) int {
	v2, dirs := cgroupDirs(id)
	for _, d := range dirs {
		file := "memory.oom_control"
		if v2 {
			file = "memory.events"
		}
		data, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var n int
			if _, err := fmt.Sscanf(line, "oom_kill %d", &n); err == nil {
				return n
			}
		}
	}
	return 0
}

// cgroupStats reads CPU time and memory of the sandbox's cgroup.
func cgroupStats(id string) runtime.Stats {
	v2, dirs := cgroupDirs(id)
	var st runtime.Stats
	read := func(path string) uint64 {
		b, _ := os.ReadFile(path)
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	if v2 {
		d := dirs[0]
		st.MemoryBytes = read(filepath.Join(d, "memory.current"))
		st.Pids = read(filepath.Join(d, "pids.current"))
		if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil {
			var usec uint64
			for _, line := range strings.Split(string(b), "\n") {
				if _, err := fmt.Sscanf(line, "usage_usec %d", &usec); err == nil {
					st.CPUNanos = usec * 1000
				}
			}
		}
		return st
	}
	for _, d := range dirs {
		switch filepath.Base(filepath.Dir(filepath.Dir(d))) {
		case "memory":
			st.MemoryBytes = read(filepath.Join(d, "memory.usage_in_bytes"))
		case "pids":
			st.Pids = read(filepath.Join(d, "pids.current"))
		case "cpuacct":
			st.CPUNanos = read(filepath.Join(d, "cpuacct.usage"))
		}
	}
	return st
}
