package agent

import (
	"log/slog"
	"net"
	"time"
)

// DefaultListenAddr is envd's port; the E2B SDKs hard-code it.
const DefaultListenAddr = ":49983"

// Config configures an Agent. The zero value is usable: every field has a
// default that matches running as PID 1 inside a sandbox.
type Config struct {
	// ListenAddr is the TCP address to serve on. Default ":49983".
	ListenAddr string
	// Listener, when set, is what Run serves on instead of ListenAddr (a
	// microVM guest's host channel).
	Listener net.Listener
	// AccessToken is the initial X-Access-Token. Empty means no auth
	// (E2B "secure: false") until POST /init sets one.
	AccessToken string
	// DefaultUser runs processes and owns files when a request names no
	// user. If it does not exist in /etc/passwd, root is used.
	DefaultUser string
	// DefaultWorkdir is the cwd of processes that ask for none, if it exists.
	DefaultWorkdir string
	// RootDir is where etc/passwd and etc/group are read from. Default "/".
	// Tests point it at a temp dir.
	RootDir string
	// OutputBufferBytes bounds the per-process output ring used for
	// X-Space-Output-Offset replay. Default 1 MiB.
	OutputBufferBytes int
	// ExitedRetention is how long an exited process's record is kept for a
	// late Connect. Default 5 minutes.
	ExitedRetention time.Duration
	// MaxExitedRetained caps the exited records kept. Default 1000.
	MaxExitedRetained int
	// SlowReaderTimeout is how long a full output ring may block a process
	// for a stream that is not reading. Default 30 seconds.
	SlowReaderTimeout time.Duration
	// ReapAllChildren makes the reaper collect every child (wait4(-1)), which
	// is what PID 1 must do for reparented orphans. When false only the
	// processes the agent started are waited for, so the agent can share its
	// host process with other code that runs children (tests).
	ReapAllChildren bool
	// ForwardSignals makes Run forward SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
	// to the started process groups, and SIGTERM/SIGINT too before shutting
	// down.
	ForwardSignals bool
	// OutlivesSignals keeps Run serving through every signal that would
	// end it: the agent is a guest kernel's init, whose exit panics the
	// kernel, and the host never ends a guest by signalling it (its VMM
	// does), so any such signal came from a process in the guest. The
	// forwarded ones are still forwarded; the rest are only logged.
	OutlivesSignals bool
	// ApplySystemSettings lets POST /init set the hostname and system clock
	// and feed entropy to /dev/urandom. Only the sandbox's PID 1 should;
	// tests leave it off so they never modify the host.
	ApplySystemSettings bool
	// ShutdownGrace is how long Run waits for processes and requests after a
	// termination signal. Default 5 seconds.
	ShutdownGrace time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.RootDir == "" {
		c.RootDir = "/"
	}
	if c.OutputBufferBytes <= 0 {
		c.OutputBufferBytes = 1 << 20
	}
	if c.ExitedRetention <= 0 {
		c.ExitedRetention = 5 * time.Minute
	}
	if c.MaxExitedRetained <= 0 {
		c.MaxExitedRetained = 1000
	}
	if c.SlowReaderTimeout <= 0 {
		c.SlowReaderTimeout = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
