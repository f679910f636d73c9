package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/space-platform/space/internal/storage"
)

// The baselines run runsc directly on the server's host, on the same
// template files the server uses, to show what the platform adds to (or
// saves over) gVisor itself.

// FindRunsc locates runsc the way `space serve` does: the configured path,
// $SPACE_RUNSC, next to this executable or in a .tools/bin beside it or
// above the working directory, then $PATH.
func FindRunsc(configured string) (string, error) {
	candidates := []string{configured, os.Getenv("SPACE_RUNSC")}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, "runsc"), filepath.Join(dir, ".tools", "bin", "runsc"))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; dir != "/"; dir = filepath.Dir(dir) {
			candidates = append(candidates, filepath.Join(dir, ".tools", "bin", "runsc"))
		}
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return filepath.Abs(c)
		}
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p, nil
	}
	return "", errors.New("cannot find runsc: build it with scripts/install-deps.sh, pass --runsc or set $SPACE_RUNSC")
}

// baselinePrerequisite returns why the baselines cannot run here, or nil.
func (r *runner) baselinePrerequisite() error {
	switch {
	case os.Geteuid() != 0:
		return absent("runsc baselines need root on the server's host")
	case !r.res.Server.Local:
		return absent("runsc baselines need the server on this host (server at %s)", r.res.Server.URL)
	case r.cfg.RunscPath == "":
		return absent("no runsc binary found (--runsc)")
	}
	return nil
}

// templateVolume is the template's read-only root filesystem on the host.
func (r *runner) templateVolume() string {
	return filepath.Join(r.cfg.DataDir, "volumes", "templates", r.res.Template.ID)
}

// measureRunscRun times `runsc run` of /bin/true, start to exit, on the
// template's read-only root with an in-memory overlay for writes (runsc
// needs a writable upper layer); no network. It is the floor for booting a
// fresh gVisor sandbox and running one command in it.
func (r *runner) measureRunscRun(ctx context.Context) (*Summary, error) {
	if err := r.baselinePrerequisite(); err != nil {
		return nil, err
	}
	rootfs := r.templateVolume()
	if !fileExists(rootfs) {
		return nil, absent("template volume %s not found (is --data-dir %s the server's?)", rootfs, r.cfg.DataDir)
	}
	dir, err := os.MkdirTemp("", "space-bench-runsc-")
	if err != nil {
		return nil, err
	}
	defer removeRunscDir(dir)
	bundle, root := filepath.Join(dir, "bundle"), filepath.Join(dir, "root")
	if err := writeTrueBundle(bundle, rootfs); err != nil {
		return nil, err
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return nil, err
	}
	return r.sample(ctx, KeyBaselineRunscRun, func(ctx context.Context, i int) (time.Duration, error) {
		id := fmt.Sprintf("space-bench-%s-%d", r.runID, i)
		run := exec.CommandContext(ctx, r.cfg.RunscPath, "--root", root, "--platform", "systrap", "--network", "none",
			"--overlay2=root:memory", "run", "--bundle", bundle, id)
		var output bytes.Buffer
		run.Stdout, run.Stderr = &output, &output
		d, err := timed(run.Run)
		// runsc run removes the container when it exits; this is for one
		// that failed half-way.
		_ = exec.Command(r.cfg.RunscPath, "--root", root, "delete", "--force", id).Run()
		if err != nil {
			return 0, fmt.Errorf("runsc run: %w: %s", err, lastLines(output.String(), 5))
		}
		return d, nil
	})
}

// writeTrueBundle writes an OCI bundle that runs /bin/true on rootfs,
// mounted read-only.
func writeTrueBundle(bundle, rootfs string) error {
	spec := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{"/bin/true"},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "space-bench",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
	data, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600)
}

// removeRunscDir removes a scratch runsc directory, first detaching what
// runsc mounted inside it (the empty network namespace of --network none).
func removeRunscDir(dir string) {
	storage.UnmountUnder(dir)
	_ = os.RemoveAll(dir)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
