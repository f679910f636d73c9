package template

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
)

// busyboxCandidates are where Debian's busybox-static installs the binary.
var busyboxCandidates = []string{"/bin/busybox", "/usr/bin/busybox"}

// findStaticBusybox returns the host's statically linked busybox: a
// dynamically linked one would not run inside a rootfs without libc.
func findStaticBusybox() (string, error) {
	for _, p := range busyboxCandidates {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", errors.New("no statically linked busybox on the host (install busybox-static)")
}

// minimalDirs are created with these modes; /tmp-like ones are sticky.
var minimalDirs = []struct {
	path string
	mode os.FileMode
}{
	{"bin", 0o755}, {"sbin", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
	{"etc", 0o755}, {"tmp", 0o777 | os.ModeSticky}, {"root", 0o700}, {"home", 0o755},
	{"home/user", 0o755}, {"proc", 0o555}, {"dev", 0o755}, {"sys", 0o555}, {"run", 0o755},
	{"var", 0o755}, {"var/tmp", 0o777 | os.ModeSticky}, {spaceDir, 0o755},
}

var minimalFiles = []struct {
	path    string
	mode    os.FileMode
	content string
}{
	{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
	{"etc/group", 0o644, "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"},
	{"etc/shadow", 0o640, "root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n"},
	{"etc/hostname", 0o644, "space\n"},
	{"etc/hosts", 0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	// The sandbox runtime provides the real one.
	{"etc/resolv.conf", 0o644, "# placeholder: replaced when a sandbox starts\n"},
}

// buildMinimal fills an empty rootfs with busybox and the skeleton of a
// Unix system: offline and done in well under a second.
func buildMinimal(ctx context.Context, rootfs, busybox string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range minimalDirs {
		if err := root.MkdirAll(d.path, 0o755); err != nil {
			return fmt.Errorf("create /%s: %w", d.path, err)
		}
		if err := root.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("chmod /%s: %w", d.path, err)
		}
	}
	if err := root.Lchown("home/user", 1000, 1000); err != nil {
		return fmt.Errorf("chown /home/user: %w", err)
	}
	for _, f := range minimalFiles {
		if err := root.WriteFile(f.path, []byte(f.content), f.mode); err != nil {
			return fmt.Errorf("write /%s: %w", f.path, err)
		}
		if err := root.Chmod(f.path, f.mode); err != nil {
			return err
		}
	}
	if err := copyHostFile(root, busybox, "bin/busybox", 0o755); err != nil {
		return fmt.Errorf("install busybox: %w", err)
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return err
	}
	for _, applet := range applets {
		if applet == "bin/busybox" {
			continue
		}
		if err := root.MkdirAll(path.Dir(applet), 0o755); err != nil {
			return err
		}
		if err := root.Symlink("/bin/busybox", applet); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link applet /%s: %w", applet, err)
		}
	}
	return nil
}

// busyboxApplets lists applet install paths relative to / ("bin/sh",
// "usr/bin/env", ...), as busybox --install would create them.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	var applets []string
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "/")
		if line == "" || strings.Contains(line, "..") {
			continue
		}
		applets = append(applets, line)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list-full listed no applets", busybox)
	}
	return applets, nil
}

// copyHostFile copies a host file into the rootfs, owned by root.
func copyHostFile(root *os.Root, src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := root.Lchown(dst, 0, 0); err != nil {
		return err
	}
	return root.Chmod(dst, mode)
}

// WriteMinimalRootfs fills the empty directory dir with the tree a build
// of the minimal template makes (the host's busybox-static and a Unix
// skeleton), without a template manager: a root filesystem for tests of
// runtime backends (runtime/runtimetest).
func WriteMinimalRootfs(ctx context.Context, dir string) error {
	busybox, err := findStaticBusybox()
	if err != nil {
		return err
	}
	return buildMinimal(ctx, dir, busybox)
}
