package agent

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// IsPID1 reports whether the agent runs as the sandbox's init process.
func IsPID1() bool { return os.Getpid() == 1 }

// forwardedSignals reach every started process group. As PID 1 the agent is
// what the runtime signals to stop the sandbox, and the kernel does not
// deliver default-action signals to PID 1, so children would never hear
// about them otherwise.
var forwardedSignals = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// fatalSignals are the other signals whose Go default, when another
// process sends them, ends the agent (with a stack dump or at once).
// With Config.OutlivesSignals they are caught and dropped: a guest
// process sending one to its init must not end the guest.
var fatalSignals = []os.Signal{unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGSTKFLT, unix.SIGSYS,
	unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGALRM, unix.SIGVTALRM, unix.SIGPROF, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPWR}

// forwardSignals relays signals to the process groups; on SIGTERM/SIGINT it
// then waits up to ShutdownGrace for them to exit and calls shutdown,
// unless the agent outlives signals.
func (a *Agent) forwardSignals(ctx context.Context, shutdown context.CancelFunc) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, forwardedSignals...)
	if a.cfg.OutlivesSignals {
		// Caught, not ignored: an ignored disposition would be inherited
		// by every process the agent starts.
		signal.Notify(ch, fatalSignals...)
	}
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-ch:
			unixSig, _ := sig.(unix.Signal)
			if !slices.Contains(forwardedSignals, sig) {
				a.log.Warn("dropped a signal to the guest's init", "signal", sig.String())
				continue
			}
			running := a.procs.running()
			a.log.Info("forwarding signal", "signal", sig.String(), "processes", len(running))
			for _, p := range running {
				_ = p.signalGroup(unixSig)
			}
			if a.cfg.OutlivesSignals {
				continue
			}
			if unixSig == unix.SIGTERM || unixSig == unix.SIGINT {
				a.awaitProcesses(ctx, a.cfg.ShutdownGrace)
				shutdown()
				return
			}
		}
	}
}

// awaitProcesses waits until no started process is running, or timeout.
func (a *Agent) awaitProcesses(ctx context.Context, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, p := range a.procs.running() {
		select {
		case <-p.done:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
