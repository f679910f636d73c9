package redteam

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// host holds what the runner planted and measured on the server's host,
// and checks after each attempt that none of it was touched.
type host struct {
	canaryDir, canaryPath, dropPath string
	canaryToken, hiddenName         string
	canaryMod                       time.Time

	listener  net.Listener
	udp       net.PacketConn
	port      int
	mu        sync.Mutex
	contacted []string

	sentinel    *exec.Cmd
	sentinelArg string

	// sysctls are host kernel settings no sandbox may change.
	sysctls map[string]string
	// files are host files no sandbox may change (path → sha256); stats
	// those too large to hash each time (path → size and mtime).
	files map[string]string
	stats map[string]string
	// procs are host processes no sandbox may stop or kill (pid → what),
	// besides the sentinel: the neighbours' QEMU.
	procs map[int]string
	// secrets must never appear in anything a sandbox prints: name → value.
	secrets map[string]string
	// notes say which host checks could not be set up.
	notes []string
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// plantHost sets up the host canaries. What cannot be set up (not root,
// not on the server's host) is noted and its check left out; the canary
// file, the listener and the secrets always exist.
func plantHost(canaryRoot string) (*host, error) {
	h := &host{sysctls: map[string]string{}, files: map[string]string{}, stats: map[string]string{}, procs: map[int]string{}, secrets: map[string]string{}}
	var err error
	if h.canaryDir, err = os.MkdirTemp(canaryRoot, "space-redteam-"); err != nil {
		return nil, fmt.Errorf("canary directory: %w", err)
	}
	h.canaryPath = filepath.Join(h.canaryDir, "canary")
	h.dropPath = filepath.Join(h.canaryDir, "escaped")
	h.canaryToken = "space-redteam-canary-" + randomHex(16)
	if err := os.WriteFile(h.canaryPath, []byte(h.canaryToken+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("canary file: %w", err)
	}
	if fi, err := os.Stat(h.canaryPath); err == nil {
		h.canaryMod = fi.ModTime()
	}
	h.secrets["host canary file"] = h.canaryToken
	// A second file whose name the sandbox is never told: only a listing
	// of the host directory can show it.
	h.hiddenName = "listed-only-" + randomHex(12)
	if err := os.WriteFile(filepath.Join(h.canaryDir, h.hiddenName), nil, 0o644); err != nil {
		return nil, fmt.Errorf("canary file: %w", err)
	}
	h.secrets["host canary directory listing"] = h.hiddenName

	// A listener on every host address: any connection a sandbox makes to
	// the host is seen here, whatever the sandbox says.
	if h.listener, err = net.Listen("tcp", ":0"); err != nil {
		return nil, fmt.Errorf("host listener: %w", err)
	}
	h.port = h.listener.Addr().(*net.TCPAddr).Port
	listenerToken := "space-redteam-host-listener-" + randomHex(16)
	h.secrets["host listener greeting"] = listenerToken
	go h.accept(listenerToken)
	if h.udp, err = net.ListenPacket("udp", ":"+strconv.Itoa(h.port)); err == nil {
		go h.readUDP()
	} else {
		h.notes = append(h.notes, "no UDP listener on the host: "+err.Error())
	}

	// A host process the sandbox must neither see nor signal.
	h.sentinelArg = strconv.Itoa(86400000 + int(time.Now().UnixNano()%9000000))
	h.sentinel = exec.Command("sleep", h.sentinelArg)
	if err := h.sentinel.Start(); err != nil {
		h.notes = append(h.notes, "no host sentinel process: "+err.Error())
		h.sentinel = nil
	} else {
		h.secrets["host sentinel process"] = "sleep " + h.sentinelArg
	}

	// What identifies the host kernel: a sandbox that prints any of it has
	// read the host's procfs, not gVisor's.
	for name, path := range map[string]string{
		"host kernel boot id":      "/proc/sys/kernel/random/boot_id",
		"host machine id":          "/etc/machine-id",
		"host kernel version":      "/proc/version",
		"host kernel command line": "/proc/cmdline",
	} {
		if b, err := os.ReadFile(path); err == nil {
			if v := strings.TrimSpace(string(b)); len(v) >= 16 {
				h.secrets[name] = v
			}
		}
	}
	for _, key := range []string{"kernel/core_pattern", "kernel/sysrq", "net/ipv4/ip_forward", "kernel/hostname", "kernel/modprobe", "vm/overcommit_memory"} {
		if b, err := os.ReadFile("/proc/sys/" + key); err == nil {
			h.sysctls[key] = string(b)
		}
	}
	if os.Geteuid() != 0 {
		h.notes = append(h.notes, "not root: host files of the server (agent binary, keys) are not checked")
	}
	return h, nil
}

func (h *host) accept(greeting string) {
	for {
		c, err := h.listener.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.contacted = append(h.contacted, "tcp from "+c.RemoteAddr().String())
		h.mu.Unlock()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(greeting + "\n"))
		c.Close()
	}
}

func (h *host) readUDP() {
	buf := make([]byte, 2048)
	for {
		_, from, err := h.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.contacted = append(h.contacted, "udp from "+from.String())
		h.mu.Unlock()
	}
}

// watchFile records a host file's hash so that a change is noticed; a file
// that cannot be read is noted and not watched.
func (h *host) watchFile(what, path string) {
	sum, err := fileSum(path)
	if err != nil {
		h.notes = append(h.notes, fmt.Sprintf("%s (%s) is not checked: %v", what, path, err))
		return
	}
	h.files[path] = sum
}

// watchStat records a large host file's size and modification time.
func (h *host) watchStat(what, path string) {
	st, err := statOf(path)
	if err != nil {
		h.notes = append(h.notes, fmt.Sprintf("%s (%s) is not checked: %v", what, path, err))
		return
	}
	h.stats[path] = st
}

func statOf(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes, modified %s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano)), nil
}

// watchProcess checks after each attempt that a host process still runs
// (or sleeps): not stopped, not killed.
func (h *host) watchProcess(what string, pid int) {
	if processState(pid) == "" {
		h.notes = append(h.notes, fmt.Sprintf("%s (pid %d) is not checked: not running", what, pid))
		return
	}
	h.procs[pid] = what
}

// secretFile adds a host file's content, raw and encoded, to the secrets.
func (h *host) secretFile(what, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			h.notes = append(h.notes, fmt.Sprintf("%s (%s) is not checked: %v", what, path, err))
		}
		return
	}
	if v := strings.TrimSpace(string(b)); len(v) >= 16 {
		h.secrets[what] = v
	}
	if len(b) >= 16 {
		h.secrets[what+" (hex)"] = hex.EncodeToString(b)
		h.secrets[what+" (base64)"] = base64.StdEncoding.EncodeToString(b)
	}
}

func fileSum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// check returns what changed on the host since the canaries were planted,
// or "" when nothing did.
func (h *host) check() []string {
	var bad []string
	h.mu.Lock()
	if len(h.contacted) > 0 {
		bad = append(bad, fmt.Sprintf("the host listener on port %d was reached: %s", h.port, strings.Join(h.contacted, ", ")))
		h.contacted = nil
	}
	h.mu.Unlock()
	if b, err := os.ReadFile(h.canaryPath); err != nil || string(b) != h.canaryToken+"\n" {
		bad = append(bad, fmt.Sprintf("the host canary file %s was changed or removed (%v)", h.canaryPath, err))
	} else if fi, err := os.Stat(h.canaryPath); err == nil && !fi.ModTime().Equal(h.canaryMod) {
		bad = append(bad, "the host canary file was written to")
	}
	if entries, err := os.ReadDir(h.canaryDir); err == nil {
		for _, e := range entries {
			if e.Name() != "canary" && e.Name() != h.hiddenName {
				bad = append(bad, fmt.Sprintf("a file appeared in the host canary directory: %s", filepath.Join(h.canaryDir, e.Name())))
			}
		}
	}
	if h.sentinel != nil {
		if state := processState(h.sentinel.Process.Pid); state != "S" && state != "R" && state != "D" {
			bad = append(bad, fmt.Sprintf("the host sentinel process %d is in state %q (signalled?)", h.sentinel.Process.Pid, state))
		}
	}
	for pid, what := range h.procs {
		if state := processState(pid); state != "S" && state != "R" && state != "D" {
			bad = append(bad, fmt.Sprintf("%s (host pid %d) is in state %q (signalled?)", what, pid, state))
		}
	}
	for path, was := range h.stats {
		if now, err := statOf(path); err != nil || now != was {
			bad = append(bad, fmt.Sprintf("host file %s changed: %s, was %s (%v)", path, now, was, err))
		}
	}
	for key, was := range h.sysctls {
		if b, err := os.ReadFile("/proc/sys/" + key); err == nil && string(b) != was {
			bad = append(bad, fmt.Sprintf("host sysctl %s changed from %q to %q", strings.ReplaceAll(key, "/", "."), strings.TrimSpace(was), strings.TrimSpace(string(b))))
		}
	}
	for path, was := range h.files {
		if now, err := fileSum(path); err != nil || now != was {
			bad = append(bad, fmt.Sprintf("host file %s changed (%v)", path, err))
		}
	}
	return bad
}

// processState is the state letter of a host process ("" if it is gone).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2 : i+3]
	}
	return "?"
}

// leaks returns the names of the secrets that appear in out.
func (h *host) leaks(out string) []string {
	return findSecrets(h.secrets, out)
}

func findSecrets(secrets map[string]string, out string) []string {
	var found []string
	for name, v := range secrets {
		if v != "" && strings.Contains(out, v) {
			found = append(found, name)
		}
	}
	return found
}

func (h *host) close() {
	if h.listener != nil {
		h.listener.Close()
	}
	if h.udp != nil {
		h.udp.Close()
	}
	if h.sentinel != nil {
		_ = h.sentinel.Process.Kill()
		_ = h.sentinel.Wait()
	}
	if h.canaryDir != "" {
		_ = os.RemoveAll(h.canaryDir)
	}
}

// hostAddrs lists the host's own addresses, which no sandbox may reach.
func hostAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		// Loopback inside a sandbox is the sandbox's own.
		if !ok || ipn.IP.IsLoopback() {
			continue
		}
		out = append(out, ipn.IP.String())
	}
	return out
}
