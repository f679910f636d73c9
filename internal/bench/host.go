package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Host-side readings. They describe the machine the benchmark runs on,
// which must be the server's for them to mean anything (ServerInfo.Local).

const cgroupRoot = "/sys/fs/cgroup"

// cgroupVersion tells the unified hierarchy (v2) from the split one (v1).
func cgroupVersion() string {
	if fileExists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		return "v2"
	}
	if fileExists(filepath.Join(cgroupRoot, "memory")) {
		return "v1"
	}
	return ""
}

// sandboxCgroupDir is the sandbox's cgroup (/space/<id>, see
// internal/runtime/gvisor) in the memory hierarchy.
func sandboxCgroupDir(id string) (string, error) {
	switch cgroupVersion() {
	case "v2":
		return filepath.Join(cgroupRoot, "space", id), nil
	case "v1":
		return filepath.Join(cgroupRoot, "memory", "space", id), nil
	}
	return "", fmt.Errorf("no memory cgroup hierarchy under %s", cgroupRoot)
}

// sandboxCgroupMemory reads the memory the host accounts to a sandbox's
// cgroup: memory.usage_in_bytes on cgroup v1, memory.current on v2. Both
// include the page cache the sandbox caused, as the kernel charges it.
func sandboxCgroupMemory(id string) (uint64, error) {
	dir, err := sandboxCgroupDir(id)
	if err != nil {
		return 0, err
	}
	file := "memory.usage_in_bytes"
	if cgroupVersion() == "v2" {
		file = "memory.current"
	}
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
}

// processMemory is the memory of the host processes of one sandbox.
type processMemory struct {
	rssKiB, pssKiB uint64
	processes      int
}

// sandboxProcessMemory sums RSS and PSS over the host processes of each of
// ids: those whose command line names the id (runsc's sandbox and gofer
// processes carry it in their bundle path) and those in its cgroup. The
// cgroup adds systrap's stub processes, which have no command line but map
// the sandbox's application memory.
func sandboxProcessMemory(ids []string) (map[string]processMemory, error) {
	owner := map[string]string{} // /proc/<pid> -> sandbox id
	for _, id := range ids {
		dir, err := sandboxCgroupDir(id)
		if err != nil {
			break
		}
		raw, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, pid := range strings.Fields(string(raw)) {
			owner[filepath.Join("/proc", pid)] = id
		}
	}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	for _, dir := range procs {
		if _, ok := owner[dir]; ok {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		for _, id := range ids {
			if bytes.Contains(cmdline, []byte(id)) {
				owner[dir] = id
				break
			}
		}
	}
	out := make(map[string]processMemory, len(ids))
	for dir, id := range owner {
		m := out[id]
		m.rssKiB += statusField(filepath.Join(dir, "status"), "VmRSS:")
		m.pssKiB += statusField(filepath.Join(dir, "smaps_rollup"), "Pss:")
		m.processes++
		out[id] = m
	}
	return out, nil
}

// statusField reads a "Name:   123 kB" line of a /proc file, in KiB.
func statusField(path, name string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == name {
			n, _ := strconv.ParseUint(fields[1], 10, 64)
			return n
		}
	}
	return 0
}

// memInfo returns MemTotal and MemAvailable in bytes.
func memInfo() (total, available uint64) {
	total = statusField("/proc/meminfo", "MemTotal:") << 10
	available = statusField("/proc/meminfo", "MemAvailable:") << 10
	return total, available
}

// describeHost fills ServerInfo from this machine.
func describeHost(serverURL, runscPath string) ServerInfo {
	info := ServerInfo{URL: serverURL, Local: isLocalURL(serverURL), CPUs: runtime.NumCPU(), Cgroup: cgroupVersion()}
	info.Hostname, _ = os.Hostname()
	total, _ := memInfo()
	info.MemoryMiB = int64(total >> 20)
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		info.Kernel = strings.TrimSpace(string(raw))
	}
	if runscPath != "" {
		if out, err := exec.Command(runscPath, "--version").Output(); err == nil {
			info.Runsc = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	return info
}

// isLocalURL reports whether the server address is on this machine: a
// loopback name or address, or one of this host's own addresses.
func isLocalURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	if name, err := os.Hostname(); err == nil && strings.EqualFold(host, name) {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipNet, ok := a.(*net.IPNet); ok && ipNet.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mib converts bytes to MiB with one decimal.
func mib(bytes uint64) float64 {
	return float64(bytes*10>>20) / 10
}
