package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"golang.org/x/term"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// interruptsBeforeGivingUp is how many Ctrl-C the user may press before the
// CLI stops waiting for a remote command that ignores SIGINT.
const interruptsBeforeGivingUp = 3

// runSession starts req in the sandbox and wires it to this process: output
// to stdout/stderr, local stdin to the session, signals to the process, and
// (for TTY sessions on a terminal) raw mode and window size. It returns the
// remote exit code as *exitStatus when it is not zero.
func runSession(ctx context.Context, c *client.Client, sandboxID string, req apiv1.CreateSessionRequest) error {
	inFd, inIsTerminal := terminalFd(stdin)
	outFd, outIsTerminal := terminalFd(stdout)
	if req.TTY {
		if _, set := req.Env["TERM"]; !set && os.Getenv("TERM") != "" {
			if req.Env == nil {
				req.Env = map[string]string{}
			}
			req.Env["TERM"] = os.Getenv("TERM")
		}
		if outIsTerminal {
			if cols, rows, err := term.GetSize(outFd); err == nil {
				req.Cols, req.Rows = uint32(cols), uint32(rows)
			}
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	session, err := c.CreateSession(ctx, sandboxID, req)
	if err != nil {
		return err
	}
	// In raw mode the terminal no longer turns "\n" into "\r\n" for our own
	// messages, and Ctrl-C reaches the remote PTY as a byte, not a signal.
	newline := "\n"
	if req.TTY && inIsTerminal {
		saved, err := term.MakeRaw(inFd)
		if err != nil {
			return fmt.Errorf("switch the terminal to raw mode: %w", err)
		}
		defer term.Restore(inFd, saved)
		newline = "\r\n"
	}
	warn := func(format string, args ...any) {
		fmt.Fprintf(stderr, "space: "+format+newline, args...)
	}

	var gaveUp atomic.Bool
	go forwardSignals(ctx, c, sandboxID, session.ID, warn, func() {
		gaveUp.Store(true)
		cancel() // unblocks the output stream below
	})
	if req.TTY && outIsTerminal {
		go watchWindowSize(ctx, func() {
			if cols, rows, err := term.GetSize(outFd); err == nil {
				_ = c.Resize(ctx, sandboxID, session.ID, uint32(cols), uint32(rows))
			}
		})
	}
	// Stdin starts flowing before attaching: the server keeps the output,
	// so nothing is lost, and a command that waits for its input (cat) is
	// not held up by the attach.
	if req.Stdin {
		go copyStdin(ctx, c, sandboxID, session.ID, stdin, warn)
	}
	stream, err := c.Attach(ctx, sandboxID, session.ID, 0)
	if err != nil {
		if gaveUp.Load() {
			return &exitStatus{code: 130}
		}
		return fmt.Errorf("attach to session %s: %w", session.ID, err)
	}
	defer stream.Close()

	for {
		ev, err := stream.Next()
		if err != nil {
			if gaveUp.Load() {
				warn("stopped waiting after %d interrupts; the command may still be running in session %s", interruptsBeforeGivingUp, session.ID)
				return &exitStatus{code: 130}
			}
			return fmt.Errorf("read output of session %s: %w", session.ID, err)
		}
		switch ev.Type {
		case apiv1.EventStdout, apiv1.EventPTY:
			if _, err := stdout.Write(ev.Data); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
		case apiv1.EventStderr:
			if _, err := stderr.Write(ev.Data); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
		case apiv1.EventTruncated:
			warn("%d bytes of earlier output were dropped by the server", ev.Truncated.From-ev.Truncated.Requested)
		case apiv1.EventExit:
			if ev.Error != "" {
				warn("%s", ev.Error)
			}
			if ev.ExitCode == 0 {
				return nil
			}
			if ev.ExitCode < 0 { // no exit status, e.g. the command could not start
				return &exitStatus{code: 1}
			}
			return &exitStatus{code: ev.ExitCode}
		}
	}
}

// forwardSignals relays SIGINT, SIGTERM and SIGHUP to the session's process
// until ctx ends; giveUp runs on the third SIGINT so a command that ignores
// it cannot hold the terminal forever.
func forwardSignals(ctx context.Context, c *client.Client, sandboxID, sessionID string, warn func(string, ...any), giveUp func()) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	interrupts := 0
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-signals:
			if err := c.Signal(ctx, sandboxID, sessionID, signalName(sig)); err != nil && ctx.Err() == nil {
				warn("forward %s: %s", signalName(sig), describeError(err))
			}
			if sig == os.Interrupt {
				interrupts++
				if interrupts >= interruptsBeforeGivingUp {
					giveUp()
					return
				}
			}
		}
	}
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// stdinChunk is how much local stdin is sent per request: large enough for
// piped data, and a keystroke is sent as soon as it is read.
const stdinChunk = 32 << 10

// copyStdin sends local stdin to the session chunk by chunk, then closes the
// session's stdin at end of file.
func copyStdin(ctx context.Context, c *client.Client, sandboxID, sessionID string, in io.Reader, warn func(string, ...any)) {
	buf := make([]byte, stdinChunk)
	for {
		n, readErr := in.Read(buf)
		if n > 0 {
			if err := c.WriteStdin(ctx, sandboxID, sessionID, bytes.NewReader(buf[:n]), false); err != nil {
				reportStdinError(ctx, err, warn)
				return
			}
		}
		if readErr != nil {
			if readErr != io.EOF {
				warn("read stdin: %s", readErr)
			}
			if err := c.WriteStdin(ctx, sandboxID, sessionID, nil, true); err != nil {
				reportStdinError(ctx, err, warn)
			}
			return
		}
	}
}

// reportStdinError stays quiet when the session is simply gone or done:
// the exit event tells the story.
func reportStdinError(ctx context.Context, err error, warn func(string, ...any)) {
	if ctx.Err() != nil || client.IsNotFound(err) || client.IsConflict(err) {
		return
	}
	warn("send stdin: %s", describeError(err))
}

// terminalFd returns the file descriptor behind r when it is a terminal.
func terminalFd(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}
