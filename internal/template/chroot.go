package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Build steps run in a chroot of the work rootfs on the host. Isolation is
// for hygiene, not security (recipes are operator-trusted): a private mount
// namespace makes every mount of the step (proc, dev, sys, caches) vanish
// with the step, even when it fails or is killed, and a PID namespace with
// --kill-child makes sure daemons a step starts die with it.

// defaultPath is the PATH of the host-side setup and of steps (unless the
// recipe's env overrides it).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// bindMount exposes a host directory inside the chroot for one step.
type bindMount struct {
	Host   string // absolute host directory
	Target string // absolute path inside the rootfs
}

// chrootStep describes one command to run in the rootfs.
type chrootStep struct {
	Rootfs string            // host path of the rootfs
	Script string            // run with /bin/sh -c inside the rootfs
	Env    map[string]string // environment of the script (merged over defaults)
	Binds  []bindMount
}

// runInChroot runs step.Script in the rootfs and copies its combined
// output, line by line, to logLine.
func runInChroot(ctx context.Context, step chrootStep, logLine func(string)) error {
	for _, dir := range []string{"proc", "dev", "sys", "tmp"} {
		if err := ensureRealDir(step.Rootfs, dir); err != nil {
			return err
		}
	}
	for _, b := range step.Binds {
		if err := ensureRealDir(step.Rootfs, strings.TrimPrefix(b.Target, "/")); err != nil {
			return err
		}
	}
	if !existsInRootfs(step.Rootfs, "bin/sh") {
		return errors.New("the rootfs has no /bin/sh to run steps with")
	}
	chrootBin, err := exec.LookPath("chroot")
	if err != nil {
		return fmt.Errorf("chroot binary: %w", err)
	}
	envBin, err := exec.LookPath("env")
	if err != nil {
		return fmt.Errorf("env binary: %w", err)
	}
	script := setupScript(step, envBin, chrootBin)
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child",
		"--propagation", "private", "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
	return runLogged(cmd, logLine)
}

// setupScript is the host-side shell that, inside the new namespaces,
// mounts what a build step needs and then execs the step in the chroot.
func setupScript(step chrootStep, envBin, chrootBin string) string {
	r := step.Rootfs
	q := shellQuote
	var s strings.Builder
	s.WriteString("set -eu\n")
	s.WriteString("hostname space-build\n")
	fmt.Fprintf(&s, "mount -t proc -o nosuid,nodev,noexec proc %s\n", q(r+"/proc"))
	// A small private /dev with just the usual character devices: no host
	// disks or consoles leak in.
	fmt.Fprintf(&s, "mount -t tmpfs -o nosuid,noexec,mode=0755,size=1m dev %s\n", q(r+"/dev"))
	fmt.Fprintf(&s, "for d in null zero full random urandom tty; do : > %s/$d; mount --bind /dev/$d %s/$d; done\n", q(r+"/dev"), q(r+"/dev"))
	fmt.Fprintf(&s, "mkdir %s %s\n", q(r+"/dev/pts"), q(r+"/dev/shm"))
	fmt.Fprintf(&s, "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts %s\n", q(r+"/dev/pts"))
	fmt.Fprintf(&s, "ln -s pts/ptmx %s\n", q(r+"/dev/ptmx"))
	fmt.Fprintf(&s, "mount -t tmpfs -o nosuid,nodev,mode=1777 shm %s\n", q(r+"/dev/shm"))
	fmt.Fprintf(&s, "ln -s /proc/self/fd %s; ln -s /proc/self/fd/0 %s; ln -s /proc/self/fd/1 %s; ln -s /proc/self/fd/2 %s\n",
		q(r+"/dev/fd"), q(r+"/dev/stdin"), q(r+"/dev/stdout"), q(r+"/dev/stderr"))
	fmt.Fprintf(&s, "mount --bind -o ro /sys %s\n", q(r+"/sys"))
	for _, b := range step.Binds {
		fmt.Fprintf(&s, "mount --bind %s %s\n", q(b.Host), q(r+b.Target))
	}
	fmt.Fprintf(&s, "exec %s -i", q(envBin))
	for _, kv := range stepEnv(step.Env) {
		s.WriteString(" " + q(kv))
	}
	fmt.Fprintf(&s, " %s %s /bin/sh -c %s\n", q(chrootBin), q(r), q(step.Script))
	return s.String()
}

// stepEnv is the sorted environment of a step: defaults, then the recipe's.
func stepEnv(env map[string]string) []string {
	merged := map[string]string{
		"PATH":    defaultPath,
		"HOME":    "/root",
		"USER":    "root",
		"LOGNAME": "root",
		"SHELL":   "/bin/sh",
		"TERM":    "dumb",
	}
	for k, v := range env {
		merged[k] = v
	}
	out := make([]string, 0, len(merged))
	for k, v := range merged {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// runLogged runs cmd with stdout and stderr merged into one pipe and feeds
// each output line to logLine. The whole process group is killed when the
// context ends.
func runLogged(cmd *exec.Cmd, logLine func(string)) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pw.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyLines(pr, logLine)
	}()
	err = cmd.Wait()
	pr.Close()
	<-done
	return err
}

// copyLines splits r into lines (treating \r as a line end too, for
// progress bars) and passes each non-empty one on.
func copyLines(r io.Reader, logLine func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	sc.Split(scanLinesOrCR)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), " \t"); line != "" {
			logLine(line)
		}
	}
}

func scanLinesOrCR(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		if b == '\n' || b == '\r' {
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// ensureRealDir makes rel (a path inside the rootfs) exist as a directory
// whose every component is a real directory, never a symlink: the host
// kernel resolves mount targets, and a symlink there could point a mount
// at a host path.
func ensureRealDir(rootfs, rel string) error {
	cur := rootfs
	for _, part := range strings.Split(filepath.Clean(rel), "/") {
		if part == "" || part == "." {
			continue
		}
		cur = filepath.Join(cur, part)
		info, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(cur, 0o755); err != nil {
				return fmt.Errorf("create %s in rootfs: %w", rel, err)
			}
			continue
		}
		if err != nil {
			return err
		}
		if !info.IsDir() {
			return fmt.Errorf("/%s in the rootfs must be a directory, not %v", rel, info.Mode().Type())
		}
	}
	return nil
}

// existsInRootfs reports whether rel exists in the rootfs, resolving
// symlinks inside it (an absolute link like /bin/sh -> /bin/busybox is
// resolved against the rootfs, not the host).
func existsInRootfs(rootfs, rel string) bool {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return false
	}
	defer root.Close()
	for range 40 {
		info, err := root.Lstat(rel)
		if err != nil {
			return false
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return true
		}
		target, err := root.Readlink(rel)
		if err != nil {
			return false
		}
		if filepath.IsAbs(target) {
			rel = strings.TrimPrefix(filepath.Clean(target), "/")
		} else {
			rel = filepath.Join(filepath.Dir(rel), target)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return false
		}
	}
	return false
}

// shellQuote quotes s for POSIX sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
