package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// debootstrap bootstraps a Debian minbase system into the empty rootfs,
// with the recipe's packages included so that one resolver pass installs
// everything.
//
// Two caches under <DataDir>/cache/debootstrap make a rebuild after the
// volumes were wiped fast: the downloaded .debs (per suite), and a tarball
// of the bootstrapped tree keyed by suite, mirror and package list, since
// unpacking and configuring packages, not downloading them, is most of the
// minute debootstrap takes. Delete the cache directory to pick up new
// package versions.
func (m *Manager) debootstrap(ctx context.Context, rootfs, suite string, include []string, logLine func(string)) error {
	tarball := filepath.Join(m.cfg.DataDir, "cache", "debootstrap", bootstrapKey(suite, m.cfg.DebianMirror, include)+".tar")
	if _, err := os.Stat(tarball); err == nil {
		logLine("using cached bootstrap " + tarball)
		cmd := exec.CommandContext(ctx, "tar", "--extract", "--file", tarball, "--directory", rootfs,
			"--numeric-owner", "--preserve-permissions", "--xattrs", "--xattrs-include=*", "--acls")
		cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
		if err := runLogged(cmd, logLine); err != nil {
			return fmt.Errorf("unpack cached bootstrap %s: %w", tarball, err)
		}
		return nil
	}
	if err := m.runDebootstrap(ctx, rootfs, suite, include, logLine); err != nil {
		return err
	}
	if err := cleanDebianRootfs(rootfs); err != nil {
		return err
	}
	// Best effort: a failed cache write only costs time next build.
	tmp := tarball + ".tmp"
	cmd := exec.CommandContext(ctx, "tar", "--create", "--file", tmp, "--directory", rootfs,
		"--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "--one-file-system", ".")
	cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
	if err := runLogged(cmd, logLine); err != nil {
		logLine("not caching the bootstrap: " + err.Error())
		os.Remove(tmp)
	} else if err := os.Rename(tmp, tarball); err != nil {
		os.Remove(tmp)
	}
	return nil
}

// bootstrapKey names a cached bootstrap tree.
func bootstrapKey(suite, mirror string, include []string) string {
	sorted := slices.Sorted(slices.Values(include))
	sum := sha256.Sum256([]byte(BuilderVersion + "\x00" + mirror + "\x00" + strings.Join(sorted, ",")))
	return suite + "-" + hex.EncodeToString(sum[:8])
}

// runDebootstrap runs debootstrap itself.
func (m *Manager) runDebootstrap(ctx context.Context, rootfs, suite string, include []string, logLine func(string)) error {
	cache := filepath.Join(m.cfg.DataDir, "cache", "debootstrap", suite)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("debootstrap cache: %w", err)
	}
	args := []string{
		// debootstrap mounts /proc and /sys in the target itself and may
		// leave them behind on failure; a private mount namespace cannot.
		"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"debootstrap", "--variant=minbase", "--cache-dir=" + cache,
	}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	args = append(args, suite, rootfs, m.cfg.DebianMirror)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	// One debootstrap per cache at a time: concurrent runs would race on
	// the same partial downloads.
	m.aptMu.Lock()
	defer m.aptMu.Unlock()
	if err := runLogged(cmd, logLine); err != nil {
		return fmt.Errorf("debootstrap %s: %w (see the build log)", suite, err)
	}
	return nil
}

// aptInstall installs packages with apt-get in the rootfs chroot. The
// host-side apt cache is bind-mounted over /var/cache/apt/archives so that
// .debs are kept across builds, and package lists are removed afterwards
// to keep the template small.
func (m *Manager) aptInstall(ctx context.Context, rootfs string, packages []string, env map[string]string, logLine func(string)) error {
	if !existsInRootfs(rootfs, "usr/bin/apt-get") {
		return fmt.Errorf("packages: the base has no apt-get; apt packages need a Debian-based base")
	}
	cache := filepath.Join(m.cfg.DataDir, "cache", "apt")
	if err := os.MkdirAll(filepath.Join(cache, "partial"), 0o755); err != nil {
		return fmt.Errorf("apt cache: %w", err)
	}
	quoted := make([]string, len(packages))
	for i, p := range packages {
		quoted[i] = shellQuote(p)
	}
	script := `set -e
cleanup() { rm -f /usr/sbin/policy-rc.d; rm -rf /var/lib/apt/lists/*; }
trap cleanup EXIT
# Packages must not start services in the build chroot.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d
apt-get update -q
apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 ` + strings.Join(quoted, " ") + "\n"
	stepEnv := map[string]string{"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
	for k, v := range env {
		stepEnv[k] = v
	}
	m.aptMu.Lock()
	defer m.aptMu.Unlock()
	return runInChroot(ctx, chrootStep{
		Rootfs: rootfs,
		Script: script,
		Env:    stepEnv,
		Binds:  []bindMount{{Host: cache, Target: "/var/cache/apt/archives"}},
	}, logLine)
}

// cleanDebianRootfs drops what apt and debootstrap leave behind that a
// template does not need: package lists and downloaded archives.
func cleanDebianRootfs(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, dir := range []string{"var/lib/apt/lists", "var/cache/apt/archives"} {
		f, err := root.Open(dir)
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, name := range names {
			if name == "lock" || name == "partial" {
				continue
			}
			if err := root.RemoveAll(dir + "/" + name); err != nil {
				return fmt.Errorf("clean /%s: %w", dir, err)
			}
		}
	}
	for _, f := range []string{"var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin"} {
		root.Remove(f)
	}
	return nil
}
