// Package gvisor runs sandboxes under gVisor's runsc: a user-space kernel, so
// code in a sandbox never talks to the host kernel directly. It drives the
// runsc command line (one invocation per lifecycle step) and keeps each
// sandbox's OCI bundle under its state directory. It is a runtime.Runtime,
// held to the backends' conformance suite (runtime/runtimetest).
package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
)

// AgentPort is the TCP port the agent listens on inside every sandbox.
const AgentPort = 49983

// Config configures the runsc backend.
type Config struct {
	// RunscPath is the runsc binary (built statically; see scripts/install-deps.sh).
	RunscPath string
	// StateDir holds runsc's state (--root) and the sandboxes' bundles.
	StateDir string
	// Platform is runsc's --platform; systrap works everywhere this runs.
	Platform string
	// ExtraFlags are passed to every runsc invocation (e.g. --debug).
	ExtraFlags []string
	// Namespaces holds the network slots sandboxes run in; DialAgent
	// reaches the agent through them.
	Namespaces *network.Namespaces
}

// Runtime is the gVisor backend.
type Runtime struct {
	cfg Config
}

// New checks that runsc runs and prepares the state directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if cfg.RunscPath == "" {
		return nil, errors.New("gvisor: no runsc path configured")
	}
	if cfg.Namespaces == nil {
		return nil, errors.New("gvisor: no network namespace directory configured")
	}
	if out, err := exec.Command(cfg.RunscPath, "--version").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gvisor: %s --version: %v: %s", cfg.RunscPath, err, bytes.TrimSpace(out))
	}
	for _, dir := range []string{cfg.rootDir(), cfg.bundlesDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	return &Runtime{cfg: cfg}, nil
}

func (c Config) rootDir() string    { return filepath.Join(c.StateDir, "runsc") }
func (c Config) bundlesDir() string { return filepath.Join(c.StateDir, "bundles") }

func (r *Runtime) bundleDir(id string) string { return filepath.Join(r.cfg.bundlesDir(), id) }

// ConsoleLog is where the sandbox's first process writes stdout and stderr.
func (r *Runtime) ConsoleLog(id string) string {
	return filepath.Join(r.bundleDir(id), "console.log")
}

// globalFlags are the flags every runsc invocation shares. --overlay2=none
// sends root filesystem writes through the gofer to the host volume, so they
// are durable and not held in sandbox memory. --allow-suid lets sudo work
// inside the sandbox (the E2B convention); it elevates only within gVisor's
// kernel. --file-access-mounts=shared (runsc's default, spelled out because
// volumes depend on it) makes the sentry revalidate its cache of bind-mounted
// volumes against the host, so a write one sandbox makes to a shared volume
// is seen by every other sandbox mounting it.
func (r *Runtime) globalFlags() []string {
	flags := []string{
		"--root", r.cfg.rootDir(),
		"--platform", r.cfg.Platform,
		"--network", "sandbox",
		"--overlay2", "none",
		"--file-access-mounts", "shared",
		"--cpu-num-from-quota",
		"--host-uds", "none",
		"--allow-suid",
	}
	return append(flags, r.cfg.ExtraFlags...)
}

func (r *Runtime) runsc(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.cfg.RunscPath, append(r.globalFlags(), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLines(stderr.String(), 5))
	}
	return out, nil
}

var _ runtime.Runtime = (*Runtime)(nil)

// Start creates and starts a sandbox from spec.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	if err := r.prepare(spec); err != nil {
		return err
	}
	return r.launch(ctx, spec.ID, "run", "--detach", "--bundle", r.bundleDir(spec.ID), spec.ID)
}

// Restore starts a sandbox from a checkpoint image instead of booting it.
// The bundle may differ from the one checkpointed (another root volume, for
// a branch); the image carries memory and process state.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, imageDir string) error {
	if err := r.prepare(spec); err != nil {
		return err
	}
	return r.launch(ctx, spec.ID, "restore", "--detach", "--bundle", r.bundleDir(spec.ID), "--image-path", imageDir, spec.ID)
}

// prepare writes the sandbox's bundle and readies its network slot. With
// --network=sandbox, runsc takes the sandbox-side veth's address and routes
// into gVisor's own netstack and strips them from the host interface, so a
// slot that held a sandbox before (a restore in place) has lost them: they
// are applied again before every start or restore.
func (r *Runtime) prepare(spec runtime.Spec) error {
	if err := r.writeBundle(spec); err != nil {
		return err
	}
	if err := spec.Network.Prepare(); err != nil {
		return fmt.Errorf("gvisor: network slot of %s: %w", spec.ID, err)
	}
	return nil
}

// launch runs a detaching runsc command. The sandbox inherits its stdio, so
// both go to the sandbox's console log: a pipe would be held open by the
// sandbox and never reach EOF.
func (r *Runtime) launch(ctx context.Context, id string, args ...string) error {
	logPath := r.ConsoleLog(id)
	console, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open console log of %s: %w", id, err)
	}
	defer console.Close()
	before, _ := console.Seek(0, io.SeekEnd)
	cmd := exec.CommandContext(ctx, r.cfg.RunscPath, append(r.globalFlags(), args...)...)
	cmd.Stdout = console
	cmd.Stderr = console
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		if int64(len(out)) >= before {
			out = out[before:]
		}
		_ = r.Destroy(context.WithoutCancel(ctx), id)
		return fmt.Errorf("runsc %s %s: %w: %s", args[0], id, err, lastLines(string(out), 5))
	}
	if err := leaveUnifiedParent(id); err != nil {
		_ = r.Destroy(context.WithoutCancel(ctx), id)
		return err
	}
	return nil
}

// Checkpoint saves the sandbox's memory and process state into imageDir. With
// leaveRunning the sandbox continues afterwards (snapshots); otherwise it
// stops (suspend).
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error {
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	args := []string{"checkpoint", "--image-path", imageDir}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	_, err := r.runsc(ctx, append(args, id)...)
	return err
}

// Pause freezes every process of the sandbox; memory stays resident.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	_, err := r.runsc(ctx, "pause", id)
	return err
}

// Resume thaws a paused sandbox.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	_, err := r.runsc(ctx, "resume", id)
	return err
}

// Destroy kills the sandbox and removes its runsc state, cgroup and bundle.
// Destroying a sandbox that does not exist is not an error.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if _, err := r.State(ctx, id); err == nil {
		if _, err := r.runsc(ctx, "delete", "--force", id); err != nil {
			if _, stateErr := r.State(ctx, id); !errors.Is(stateErr, runtime.ErrNotFound) {
				return fmt.Errorf("destroy %s: %w", id, err)
			}
		}
	}
	// A runsc command killed halfway (a restore whose caller went away)
	// can leave the sandbox's processes running with no state for runsc
	// to find them by: they go too, or the sandbox would outlive its
	// delete.
	if err := r.killStrays(ctx, id); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	removeUnified(id)
	if err := os.RemoveAll(r.bundleDir(id)); err != nil {
		return fmt.Errorf("destroy %s: remove bundle: %w", id, err)
	}
	return nil
}

// strays returns the pids of the sandbox's own processes (runsc-sandbox,
// runsc-gofer, which name the sandbox last and this runtime's root).
func (r *Runtime) strays(id string) []int {
	var pids []int
	root := "--root=" + r.cfg.rootDir()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if (args[0] != "runsc-sandbox" && args[0] != "runsc-gofer") || args[len(args)-1] != id || !slices.Contains(args, root) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killStrays kills what strays finds and waits until it is gone.
func (r *Runtime) killStrays(ctx context.Context, id string) error {
	for {
		pids := r.strays(id)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v of the sandbox outlived SIGKILL: %w", pids, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// State reports the sandbox's status, or runtime.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	out, err := r.runsc(ctx, "state", id)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "not found") {
			return runtime.State{}, fmt.Errorf("%s: %w", id, runtime.ErrNotFound)
		}
		return runtime.State{}, err
	}
	var st struct {
		Status string `json:"status"`
		PID    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return runtime.State{}, fmt.Errorf("parse runsc state of %s: %w", id, err)
	}
	return runtime.State{Status: runtime.Status(st.Status), PID: st.PID}, nil
}

// List returns the ids of every sandbox runsc has state for.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	out, err := r.runsc(ctx, "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Stats reads the sandbox's resource usage.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	out, err := r.runsc(ctx, "events", "--stats", id)
	if err != nil {
		return runtime.Stats{}, err
	}
	var ev struct {
		Data struct {
			CPU struct {
				Usage struct {
					Total uint64 `json:"total"`
				} `json:"usage"`
			} `json:"cpu"`
			Memory struct {
				Usage struct {
					Usage uint64 `json:"usage"`
				} `json:"usage"`
			} `json:"memory"`
			Pids struct {
				Current uint64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return runtime.Stats{}, fmt.Errorf("parse runsc stats of %s: %w", id, err)
	}
	return runtime.Stats{
		CPUNanos:    ev.Data.CPU.Usage.Total,
		MemoryBytes: ev.Data.Memory.Usage.Usage,
		Pids:        ev.Data.Pids.Current,
	}, nil
}

// DialAgent opens a connection to the agent inside the sandbox, through the
// sandbox's network slot (see package network).
func (r *Runtime) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	return r.cfg.Namespaces.Slot(id).DialContext(ctx, "tcp", net.JoinHostPort(network.SandboxAddr, strconv.Itoa(AgentPort)))
}

// exitPollInterval is how often Wait looks whether the sandbox process
// still runs: one poll of a pidfd.
const exitPollInterval = time.Second

// Wait blocks until the sandbox's runsc sandbox process is gone, then
// tells an out-of-memory kill from other deaths by the sandbox's memory
// cgroup, which runsc made and nobody removes before Destroy.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitReason, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return "", err
	}
	if st.PID <= 0 || (st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused) {
		return exitReason(id), nil
	}
	// A pidfd, not the pid: the pid may be another process's by the time
	// the sandbox's has long gone.
	fd, err := unix.PidfdOpen(st.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return exitReason(id), nil
	}
	if err != nil {
		return "", fmt.Errorf("wait for %s: %w", id, err)
	}
	defer unix.Close(fd)
	t := time.NewTicker(exitPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			return exitReason(id), nil
		}
	}
}

// exitReason reads the sandbox's memory cgroup (v1: memory.oom_control,
// v2: memory.events) for an OOM kill.
func exitReason(id string) runtime.ExitReason {
	for _, f := range []string{"/sys/fs/cgroup/memory/space/" + id + "/memory.oom_control", "/sys/fs/cgroup/space/" + id + "/memory.events"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var count int
			if _, err := fmt.Sscanf(line, "oom_kill %d", &count); err == nil && count > 0 {
				return runtime.ExitOOM
			}
		}
	}
	return runtime.ExitDied
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Isolation is gVisor's: a user-space kernel between the sandbox and the
// host's.
func (r *Runtime) Isolation() string { return runtime.IsolationGVisor }

// Quiesce waits until no runsc command for the sandbox is still running,
// such as a checkpoint that a crashed server started: its outcome must be
// known before recovery decides what the sandbox's state is.
func (r *Runtime) Quiesce(ctx context.Context, id string) error {
	for {
		if !r.commandRunning(id) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runsc commands for %s still running: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// commandRunning reports whether a runsc command line (not the sandbox or
// gofer, which run as runsc-sandbox and runsc-gofer) names the sandbox.
func (r *Runtime) commandRunning(id string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if args[0] != r.cfg.RunscPath || args[len(args)-1] != id {
			continue
		}
		if strings.Contains(strings.Join(args, " "), "--root "+r.cfg.rootDir()) {
			return true
		}
	}
	return false
}
