package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

// outputDrainGrace is how long output may keep flowing after the process
// exited. Background children that inherited stdout would otherwise hold
// the stream open forever; envd likewise stops reading once the process is
// gone.
const outputDrainGrace = 2 * time.Second

// Output is read in chunks that grow from minReadChunk while reads fill
// them, up to maxReadChunk (which also bounds one data event): an idle or
// chatty process costs little memory, and a process that streams moves a
// megabyte per system call, each of which is a trip through gVisor.
const (
	minReadChunk = 32 << 10
	maxReadChunk = 1 << 20
)

// outputPipeSize is asked of the kernel for each output pipe (F_SETPIPE_SZ):
// a writer of large blocks then hands the agent a whole one per read
// instead of the default 64 KiB.
const outputPipeSize = 1 << 20

type startOptions struct {
	config   *processpb.ProcessConfig
	pty      *processpb.PTY
	tag      *string
	stdin    bool
	user     *userAccount
	deadline time.Time // zero: no lifetime limit
}

// errInvalidStart marks start failures caused by the request.
var errInvalidStart = errors.New("invalid process request")

// startProcess starts a process in its own process group (its own session
// with a PTY) and returns once it is running and registered, with a reader
// attached at offset 0 before any output was read, so the Start stream sees
// every byte. The caller must detach the reader.
func (a *Agent) startProcess(opts startOptions) (*process, *outputReader, error) {
	cfg := opts.config
	if cfg == nil || cfg.GetCmd() == "" {
		return nil, nil, fmt.Errorf("%w: process.cmd is required", errInvalidStart)
	}
	env := a.processEnv(opts.user, cfg.GetEnvs())
	dir, err := a.processDir(opts.user, cfg.Cwd)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errInvalidStart, err)
	}
	path, err := lookPath(cfg.GetCmd(), env)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errInvalidStart, err)
	}

	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:         env,
		Dir:         dir,
		SysProcAttr: &syscall.SysProcAttr{},
	}
	if err := setCredential(cmd.SysProcAttr, opts.user); err != nil {
		return nil, nil, err
	}

	p := &process{
		config:    cfg,
		startedAt: time.Now(),
		output:    newOutputLog(a.cfg.OutputBufferBytes, a.cfg.SlowReaderTimeout),
		done:      make(chan struct{}),
	}
	if opts.tag != nil {
		p.tag, p.hasTag = *opts.tag, true
	}

	stdio, err := prepareStdio(cmd, opts)
	if err != nil {
		return nil, nil, err
	}
	_, err = a.reaper.spawn(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		p.pid = uint32(cmd.Process.Pid)
		return cmd.Process.Pid, nil
	}, func(st exitStatus) { go a.finishProcess(p, st, stdio) })
	stdio.closeChildEnds()
	if err != nil {
		stdio.closeParentEnds()
		return nil, nil, fmt.Errorf("start %q: %w", cfg.GetCmd(), err)
	}
	// The reaper, not os.Process, waits for the child; drop the handle.
	_ = cmd.Process.Release()

	p.mu.Lock()
	p.stdin, p.pty = stdio.stdinW, stdio.ptmx
	if !opts.deadline.IsZero() {
		p.killTimer = time.AfterFunc(time.Until(opts.deadline), func() {
			p.mu.Lock()
			if p.isDone() {
				p.mu.Unlock()
				return
			}
			p.deadlineExpiry = true
			p.mu.Unlock()
			_ = p.signalGroup(unix.SIGKILL)
		})
	}
	p.mu.Unlock()

	reader, _ := p.output.attach(0)
	stdio.startPumps(p.output)
	a.procs.add(p)
	a.log.Info("process started", "pid", p.pid, "cmd", cfg.GetCmd(), "user", opts.user.Name, "pty", stdio.ptmx != nil)
	return p, reader, nil
}

// setCredential makes the child run as u. As non-root the agent can only
// start processes as itself.
func setCredential(attr *syscall.SysProcAttr, u *userAccount) error {
	if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
		return nil
	}
	if uint32(os.Geteuid()) != u.UID {
		return fmt.Errorf("%w: agent is not root and cannot run processes as %q", errPermission, u.Name)
	}
	return nil
}

var errPermission = errors.New("permission denied")

// processStdio holds both ends of a process's stdio until the child has them.
type processStdio struct {
	childEnds []*os.File
	readers   map[*os.File]outputKind
	stdinW    *os.File
	ptmx      *os.File
	pumps     sync.WaitGroup
	pumpsDone chan struct{}
}

func prepareStdio(cmd *exec.Cmd, opts startOptions) (s *processStdio, err error) {
	s = &processStdio{readers: map[*os.File]outputKind{}, pumpsDone: make(chan struct{})}
	defer func() {
		if err != nil {
			s.closeChildEnds()
			s.closeParentEnds()
		}
	}()
	if opts.pty != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("open pty: %w", err)
		}
		s.ptmx = ptmx
		s.childEnds = append(s.childEnds, tty)
		if size := opts.pty.GetSize(); size != nil {
			if err := pty.Setsize(ptmx, &pty.Winsize{Rows: uint16(size.GetRows()), Cols: uint16(size.GetCols())}); err != nil {
				return nil, fmt.Errorf("set pty size: %w", err)
			}
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A new session with the PTY as controlling terminal, so job
		// control and ^C work like in a real terminal.
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		s.readers[ptmx] = outputPTY
		return s, nil
	}

	cmd.SysProcAttr.Setpgid = true
	for _, kind := range []outputKind{outputStdout, outputStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("create output pipe: %w", err)
		}
		// Best effort: a smaller pipe only costs more reads. Through
		// SyscallConn, not Fd, which would switch the pipe to blocking
		// mode, and a blocked read is one that closing the pipe after the
		// drain grace can no longer end.
		if rc, err := r.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize) })
		}
		s.readers[r] = kind
		s.childEnds = append(s.childEnds, w)
		if kind == outputStdout {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
	}
	if opts.stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("create stdin pipe: %w", err)
		}
		s.childEnds = append(s.childEnds, r)
		s.stdinW = w
		cmd.Stdin = r
	} else {
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		s.childEnds = append(s.childEnds, devNull)
		cmd.Stdin = devNull
	}
	return s, nil
}

func (s *processStdio) closeChildEnds() {
	for _, f := range s.childEnds {
		_ = f.Close()
	}
	s.childEnds = nil
}

func (s *processStdio) closeParentEnds() {
	for f := range s.readers {
		_ = f.Close()
	}
	if s.stdinW != nil {
		_ = s.stdinW.Close()
	}
}

// startPumps copies each output fd into the log until EOF (EIO for a PTY
// whose other side is gone).
func (s *processStdio) startPumps(log *outputLog) {
	for f, kind := range s.readers {
		s.pumps.Add(1)
		go func() {
			defer s.pumps.Done()
			buf := make([]byte, minReadChunk)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					log.append(kind, buf[:n])
				}
				if n == len(buf) && len(buf) < maxReadChunk {
					buf = make([]byte, 2*len(buf))
				}
				if err != nil {
					// EOF, EIO from a PTY whose slave side is gone, or
					// ErrClosed after the drain grace: output is over.
					return
				}
			}
		}()
	}
	go func() { s.pumps.Wait(); close(s.pumpsDone) }()
}

// finishProcess runs once the reaper collected the process: it lets output
// drain, closes the fds and publishes the end result.
func (a *Agent) finishProcess(p *process, st exitStatus, stdio *processStdio) {
	select {
	case <-stdio.pumpsDone:
	case <-time.After(outputDrainGrace):
		// Descendants still hold the output open; stop reading.
		for f := range stdio.readers {
			_ = f.Close()
		}
		<-stdio.pumpsDone
	}
	for f := range stdio.readers {
		_ = f.Close()
	}
	p.output.close()

	p.mu.Lock()
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	p.end = endResult{exitCode: int32(st.exitCode()), exited: st.exited(), status: st.String()}
	if p.deadlineExpiry {
		p.end.errMsg = "process killed: Connect-Timeout-Ms deadline exceeded"
	}
	p.exitedAt = time.Now()
	close(p.done)
	p.mu.Unlock()

	a.procs.prune(time.Now())
	a.log.Info("process exited", "pid", p.pid, "status", p.end.status)
}
