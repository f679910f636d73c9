// Command space-agent is the in-sandbox daemon (PID 1 in every sandbox),
// wire-compatible with E2B's envd. See package internal/agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/space-platform/space/internal/agent"
	"github.com/space-platform/space/internal/agent/guestinit"
)

func main() {
	if guestinit.Requested() {
		// A microVM's init: nothing to return to, so power off whatever
		// happens (QEMU exits and the host sees why on the console).
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, "space-agent:", err)
		}
		guestinit.PowerOff()
	}
	// First of all, so that nothing started yet is lost in the exec; the
	// agent works on with the token where it is if it fails.
	if err := agent.HideInitialToken(); err != nil {
		fmt.Fprintln(os.Stderr, "space-agent:", err)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "space-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	pid1 := agent.IsPID1()
	var cfg agent.Config
	flag.StringVar(&cfg.ListenAddr, "listen", agent.DefaultListenAddr, "TCP address to serve HTTP/1.1 and h2c on")
	flag.StringVar(&cfg.AccessToken, "token", "", "initial access token (prefer the SPACE_AGENT_TOKEN env var, which is not visible in the process list)")
	flag.StringVar(&cfg.DefaultUser, "default-user", "user", "user for requests that name none (root if it does not exist)")
	flag.StringVar(&cfg.DefaultWorkdir, "default-workdir", "", "working directory for processes that ask for none")
	flag.StringVar(&cfg.RootDir, "root-dir", "/", "directory holding etc/passwd and etc/group")
	flag.IntVar(&cfg.OutputBufferBytes, "output-buffer-bytes", 1<<20, "per-process output kept for X-Space-Output-Offset replay")
	flag.BoolVar(&cfg.ApplySystemSettings, "apply-system-settings", pid1, "let POST /init set hostname, clock and entropy")
	verbose := flag.Bool("verbose", false, "debug logging")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.ReapAllChildren = pid1
	cfg.ForwardSignals = true

	if guestinit.Requested() {
		// Before agent.New: setup puts the host's environment (the boot
		// token) into the process's.
		ln, err := guestinit.Setup(func(f string, args ...any) { cfg.Logger.Info(fmt.Sprintf(f, args...)) })
		if err != nil {
			return fmt.Errorf("guest init: %w", err)
		}
		cfg.Listener, cfg.OutlivesSignals = ln, true
		go guestinit.GrowRoot(func(f string, args ...any) { cfg.Logger.Info(fmt.Sprintf(f, args...)) })
	}
	a, err := agent.New(cfg)
	if err != nil {
		return fmt.Errorf("create agent: %w", err)
	}
	defer a.Close()
	return a.Run(context.Background())
}
