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

// The Debian bootstrap stage is the only part of a build that runs a
// package manager on the host, and no recipe field reaches it: the suite
// must be one of bootstrapSuites (a fixed string of ours replaces the
// recipe's), the package set is bootstrapPackages, and the mirror and the
// cache directory are the operator's. Its result is a read-only volume
// per suite (templates/bootstrap-<suite>-<key>) that builds snapshot; the
// recipe's packages are then installed with apt-get inside the build
// sandbox.

// bootstrapSuites are the Debian suites a recipe may name.
var bootstrapSuites = map[string]string{"bookworm": "bookworm"}

// bootstrapPackages are in every bootstrap stage: those of the built-in
// Debian recipes (a test checks; code-interpreter-v1-runtimes, which needs
// far more, downloads its packages in the build sandbox), so that they
// build without downloading packages in the build sandbox. The Jupyter
// extras date from when code-interpreter-v1 installed only those; they
// stay, as the stage's key (and every data dir's cached stage) hangs on
// the list. debootstrap
// includes the first ones; its own dependency handling cannot configure
// the rest (python3-zmq fails), so apt-get installs them into the stage
// next, still on the host and still without any recipe input.
var (
	bootstrapInclude  = []string{"bash", "ca-certificates", "coreutils", "curl", "git", "procps", "python3", "sudo"}
	bootstrapExtras   = []string{"python3-ipykernel", "python3-jupyter-client"}
	bootstrapPackages = append(slices.Clone(bootstrapInclude), bootstrapExtras...)
)

// bootstrapVolume names the stage volume of a suite.
func (m *Manager) bootstrapVolume(suite string) string {
	sum := sha256.Sum256([]byte(BuilderVersion + "\x00" + m.cfg.DebianMirror + "\x00" + strings.Join(bootstrapPackages, ",")))
	return "templates/bootstrap-" + suite + "-" + hex.EncodeToString(sum[:8])
}

// bootstrapStage returns the stage volume of a suite, bootstrapping it
// first if it does not exist. suite must be allow-listed; the string used
// from then on is our own copy.
func (m *Manager) bootstrapStage(ctx context.Context, suite string, step func(string), logLine func(string)) (string, error) {
	suite, ok := bootstrapSuites[suite]
	if !ok {
		return "", fmt.Errorf("debian suite %q is not offered (one of %s)", suite, strings.Join(allowedSuites(), ", "))
	}
	vol := m.bootstrapVolume(suite)
	step(fmt.Sprintf("bootstrap stage: debootstrap --variant=minbase %s (built-in package set)", suite))
	// One bootstrap at a time: concurrent runs would race on the caches
	// and on the stage volume.
	m.aptMu.Lock()
	defer m.aptMu.Unlock()
	if m.cfg.Volumes.Exists(vol) {
		logLine("using the bootstrap stage " + vol)
		return vol, nil
	}
	work := vol + workSuffix
	if err := m.cfg.Volumes.Delete(work); err != nil {
		return "", err
	}
	rootfs, err := m.cfg.Volumes.Create(work)
	if err != nil {
		return "", err
	}
	err = m.fillStage(ctx, rootfs, suite, logLine)
	if err == nil {
		err = m.cfg.Volumes.Rename(work, vol)
	}
	if err != nil {
		m.cfg.Volumes.Delete(work)
		return "", err
	}
	if err := m.cfg.Volumes.SetReadOnly(vol, true); err != nil {
		m.cfg.Volumes.Delete(vol)
		return "", err
	}
	return vol, nil
}

// fillStage bootstraps suite into the stage's empty work rootfs and
// readies it for sandboxes; on an error the caller removes the work
// volume.
func (m *Manager) fillStage(ctx context.Context, rootfs, suite string, logLine func(string)) error {
	if err := m.debootstrap(ctx, rootfs, suite, logLine); err != nil {
		return err
	}
	// debootstrap copies the host's resolv.conf; the sandbox runtime
	// provides its own.
	if err := os.WriteFile(filepath.Join(rootfs, "etc/resolv.conf"), []byte("# placeholder: replaced when a sandbox starts\n"), 0o644); err != nil {
		return err
	}
	return finalizeRootfs(rootfs)
}

func allowedSuites() []string {
	var out []string
	for s := range bootstrapSuites {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// debootstrap fills the empty rootfs with a minbase system and the
// bootstrap packages.
//
// A tarball of the bootstrapped tree under <DataDir>/cache/debootstrap
// makes a rebuild after the volumes were wiped fast, since unpacking and
// configuring packages, not downloading them, is most of the minute
// debootstrap takes. Delete the cache directory to pick up new package
// versions.
func (m *Manager) debootstrap(ctx context.Context, rootfs, suite string, logLine func(string)) error {
	cacheDir := filepath.Join(m.cfg.DataDir, "cache", "debootstrap")
	tarball := filepath.Join(cacheDir, filepath.Base(m.bootstrapVolume(suite))+".tar")
	if _, err := os.Stat(tarball); err == nil {
		logLine("using cached bootstrap " + filepath.Base(tarball))
		cmd := exec.CommandContext(ctx, "tar", "--extract", "--file", tarball, "--directory", rootfs,
			"--numeric-owner", "--preserve-permissions", "--xattrs", "--xattrs-include=*", "--acls")
		cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
		if err := m.hostRun(cmd, logLine); err != nil {
			return fmt.Errorf("unpack cached bootstrap %s: %w", filepath.Base(tarball), err)
		}
		return nil
	}
	debs := filepath.Join(cacheDir, suite)
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return fmt.Errorf("debootstrap cache: %w", err)
	}
	cmd := exec.CommandContext(ctx, "unshare", debootstrapArgs(suite, rootfs, debs, m.cfg.DebianMirror)...)
	cmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	if err := m.hostRun(cmd, logLine); err != nil {
		return fmt.Errorf("debootstrap %s: %w (see the build log)", suite, err)
	}
	extras := exec.CommandContext(ctx, "unshare", stageAptArgs(rootfs)...)
	extras.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
	if err := m.hostRun(extras, logLine); err != nil {
		return fmt.Errorf("bootstrap stage: apt-get install %s: %w (see the build log)", strings.Join(bootstrapExtras, " "), err)
	}
	if err := cleanDebianRootfs(rootfs); err != nil {
		return err
	}
	// Best effort: a failed cache write only costs time next build.
	tmp := tarball + ".tmp"
	tarCmd := exec.CommandContext(ctx, "tar", "--create", "--file", tmp, "--directory", rootfs,
		"--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "--one-file-system", ".")
	tarCmd.Env = []string{"PATH=" + defaultPath, "LC_ALL=C"}
	if err := m.hostRun(tarCmd, logLine); err != nil {
		logLine("not caching the bootstrap: " + err.Error())
		os.Remove(tmp)
	} else if err := os.Rename(tmp, tarball); err != nil {
		os.Remove(tmp)
	}
	return nil
}

// allowDevices is shell that lets a chroot at rootfs open the device
// nodes debootstrap makes there (/dev/null above all), although the
// volumes are mounted nodev (storage): rootfs bound on itself with
// devices allowed, in the command's private mount namespace, which
// nothing else sees.
func allowDevices(rootfs string) string {
	q := shellQuote(rootfs)
	return "mount --bind " + q + " " + q + " && mount -o remount,bind,dev,nosuid " + q
}

// debootstrapArgs is the whole command line of the host-side debootstrap
// (after unshare). Its inputs are an allow-listed suite, paths of ours
// and the operator's mirror; it has no parameter a recipe could fill.
func debootstrapArgs(suite, rootfs, debCache, mirror string) []string {
	return []string{
		// debootstrap mounts /proc and /sys in the target itself and may
		// leave them behind on failure; a private mount namespace cannot.
		"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"/bin/sh", "-c", allowDevices(rootfs) + ` && exec "$@"`, "sh",
		"debootstrap", "--variant=minbase", "--cache-dir=" + debCache,
		"--include=" + strings.Join(bootstrapInclude, ","),
		suite, rootfs, mirror,
	}
}

// stageAptArgs installs bootstrapExtras into the freshly bootstrapped
// rootfs (nothing but Debian's packages is in it yet) with apt-get in a
// chroot: a private mount and PID namespace, so that /proc and any daemon
// a package starts go with it; policy-rc.d keeps services from starting.
func stageAptArgs(rootfs string) []string {
	q := shellQuote
	script := "set -e\n" +
		allowDevices(rootfs) + "\n" +
		"mount -t proc proc " + q(rootfs+"/proc") + "\n" +
		"printf '#!/bin/sh\\nexit 101\\n' > " + q(rootfs+"/usr/sbin/policy-rc.d") + "\n" +
		"chmod 0755 " + q(rootfs+"/usr/sbin/policy-rc.d") + "\n" +
		"chroot " + q(rootfs) + " /usr/bin/env -i PATH=" + defaultPath + " DEBIAN_FRONTEND=noninteractive LC_ALL=C /bin/sh -c " +
		q("apt-get update -q && apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "+strings.Join(bootstrapExtras, " ")) + "\n" +
		"rm -f " + q(rootfs+"/usr/sbin/policy-rc.d") + "\n"
	return []string{"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "/bin/sh", "-c", script}
}

// aptInstall installs packages with apt-get in the build sandbox. When the
// bootstrap stage has them all already, it does not even update the
// package lists.
func aptInstall(ctx context.Context, sb BuildSandbox, packages []string, env map[string]string, logLine func(string)) error {
	quoted := make([]string, len(packages))
	for i, p := range packages {
		quoted[i] = shellQuote(p)
	}
	list := strings.Join(quoted, " ")
	script := `set -e
if dpkg -s ` + list + ` >/dev/null 2>&1; then echo "already installed: $(echo ` + list + `)"; exit 0; fi
cleanup() { rm -f /usr/sbin/policy-rc.d; rm -rf /var/lib/apt/lists/*; apt-get clean; }
trap cleanup EXIT
# Packages must not start services in the build sandbox.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d
apt-get update -q
apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 ` + list + "\n"
	stepEnv := map[string]string{"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
	for k, v := range env {
		stepEnv[k] = v
	}
	return runStep(ctx, sb, script, stepEnv, logLine)
}

// cleanDebianRootfs drops what debootstrap leaves behind that a template
// does not need: package lists and downloaded archives.
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
