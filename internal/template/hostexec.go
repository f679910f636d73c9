package template

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Host-side helpers of the builder: the few commands that run on the host
// (debootstrap and tar for the built-in bootstrap stage, busybox
// --list-full) take no recipe input.

// defaultPath is the PATH of host-side helpers (debootstrap, tar) and of
// build steps (unless the recipe's env overrides it).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stepEnv is the environment of a build step: defaults, then the
// recipe's (and the base's) env.
func stepEnv(env map[string]string) map[string]string {
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
	return merged
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

// existsInRootfs reports whether rel exists in the rootfs, resolving
// symlinks inside it (an absolute link like /bin/sh -> /bin/busybox is
// resolved against the rootfs, not the host).
func existsInRootfs(rootfs, rel string) bool {
	_, ok := statInRootfs(rootfs, rel)
	return ok
}

// statInRootfs describes what rel is in the rootfs, symlinks resolved as
// existsInRootfs resolves them; ok is false when it does not exist.
func statInRootfs(rootfs, rel string) (info fs.FileInfo, ok bool) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, false
	}
	defer root.Close()
	for range 40 {
		info, err := root.Lstat(rel)
		if err != nil {
			return nil, false
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return info, true
		}
		target, err := root.Readlink(rel)
		if err != nil {
			return nil, false
		}
		if filepath.IsAbs(target) {
			rel = strings.TrimPrefix(filepath.Clean(target), "/")
		} else {
			rel = filepath.Join(filepath.Dir(rel), target)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, false
		}
	}
	return nil, false
}

// shellQuote quotes s for POSIX sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
