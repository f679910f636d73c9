package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/agent/guestinit"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/runtime"
)

// readyLine is what guestinit prints on the console once the agent's
// channel listens (Setup's last line).
const readyLine = "guestinit: ready"

// BootFloor boots one guest as Start does (the same QEMU command line,
// kernel command line, initramfs and a root image), but outside the
// backend: no cgroup, no network, no QMP waits. It returns the time from
// QEMU's exec until the guest's agent is up (guestinit's ready line on
// the console, polled every few milliseconds), then checks, untimed, that
// the agent answers the channel's handshake. rootImage is written to (pass
// a copy); dir is the guest's scratch directory. QEMU is killed at bound
// and when done. It is the floor under a cold create on this backend.
func BootFloor(ctx context.Context, qemu string, k Kernel, accel, initramfs, rootImage, dir string, limits runtime.Limits, bound time.Duration) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("boot floor: %w", hostpath.Pathless(err))
	}
	for _, f := range []string{"console.log", "agent.sock", "qmp.sock"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	env, _ := json.Marshal(map[string]any{"env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
	if err := os.WriteFile(filepath.Join(dir, "env.json"), env, 0o600); err != nil {
		return 0, fmt.Errorf("boot floor: %w", hostpath.Pathless(err))
	}
	conf := vmConfig{Machine: "microvm", Accel: accel, Limits: limits, Initramfs: initramfs, Kernel: k.Image(accel), Rootfs: rootImage}
	// QEMU drops to a uid of its own, as a sandbox's does.
	uid, err := leaseUID("floor", dir)
	if err != nil {
		return 0, fmt.Errorf("boot floor: %w", err)
	}
	defer releaseUID(uid, dir)
	conf.UID = uid
	conf.Cmdline = kernelCmdline(runtime.Spec{Hostname: "floor"}, conf)
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, qemuArgs(dir, conf)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("boot floor: qemu: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	console := filepath.Join(dir, "console.log")
	var took time.Duration
	for {
		if data, _ := os.ReadFile(console); bytes.Contains(data, []byte(readyLine)) {
			took = time.Since(start)
			break
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("boot floor: QEMU ended before the agent was up: %s%s", strings.TrimSpace(stderr.String()), consoleTail(console))
		case <-ctx.Done():
			return 0, fmt.Errorf("boot floor: the agent was not up within %s%s", bound, consoleTail(console))
		case <-time.After(5 * time.Millisecond):
		}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		return 0, fmt.Errorf("boot floor: dial the agent: %w", hostpath.Pathless(err))
	}
	defer conn.Close()
	if _, err := guestinit.ClientHandshake(conn, time.Now().Add(10*time.Second)); err != nil {
		return 0, fmt.Errorf("boot floor: %w", err)
	}
	return took, nil
}

// consoleTail is the end of a guest's console, for an error.
func consoleTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return "; console: " + strings.Join(lines[max(0, len(lines)-5):], " | ")
}
