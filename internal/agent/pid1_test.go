package agent

import (
	"context"
	"os"
	"os/signal"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A SIGTERM to the agent reaches the process groups it started. The agent
// of a gVisor sandbox then shuts down (the runtime stops a sandbox that
// way); a microVM guest's init outlives it and every other signal that
// would end it, for its exit would panic the guest's kernel.
func TestSignalsToTheAgent(t *testing.T) {
	// The signals go to this test process: caught here too, so that a
	// moment before the agent's handler is in place cannot end the test.
	guard := make(chan os.Signal, 16)
	signal.Notify(guard, unix.SIGTERM, unix.SIGSEGV)
	defer signal.Stop(guard)

	for _, outlives := range []bool{false, true} {
		name := map[bool]string{false: "sandbox-agent", true: "guest-init"}[outlives]
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, func(c *Config) {
				c.ForwardSignals, c.OutlivesSignals, c.ShutdownGrace = true, outlives, 2*time.Second
			})
			c := env.processClient(clientOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stream, res := startProcess(ctx, t, c, shell("sleep 30; echo never"))
			// Until the process is running, the handler is installed:
			// Run starts it before it serves.
			signals := []unix.Signal{unix.SIGTERM}
			if outlives {
				signals = []unix.Signal{unix.SIGSEGV, unix.SIGTERM}
			}
			for _, sig := range signals {
				if err := unix.Kill(os.Getpid(), sig); err != nil {
					t.Fatal(err)
				}
			}
			if err := collectInto(t, res, stream); err != nil {
				t.Fatal(err)
			}
			if got := res.end.GetStatus(); got != "signal: terminated" {
				t.Errorf("the started process ended with %q, want the forwarded SIGTERM", got)
			}
			select {
			case <-env.stopped:
				if outlives {
					t.Fatal("a guest's init stopped serving after signals from inside the guest")
				}
				return
			case <-time.After(4 * time.Second):
				if !outlives {
					t.Fatal("the agent still serves 4 s after SIGTERM with a 2 s grace")
				}
			}
			// Still serving: a new process runs to its end.
			stream, again := startProcess(ctx, t, c, shell("echo alive"))
			if err := collectInto(t, again, stream); err != nil || string(again.stdout) != "alive\n" {
				t.Errorf("after the signals: %q, %v", again.stdout, err)
			}
		})
	}
}
