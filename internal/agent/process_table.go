package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

// process is one process started by the process service. Its lifetime is
// independent of any stream watching it.
type process struct {
	pid       uint32
	tag       string
	hasTag    bool
	config    *processpb.ProcessConfig
	startedAt time.Time
	output    *outputLog

	mu    sync.Mutex
	stdin *os.File // write end of the stdin pipe; nil if none or closed
	pty   *os.File // PTY master; nil for pipe processes

	done     chan struct{} // closed once end is set
	end      endResult
	exitedAt time.Time

	killTimer      *time.Timer
	deadlineExpiry bool // the Connect-Timeout-Ms lifetime ran out
}

// endResult is the content of the stream's end event.
type endResult struct {
	exitCode int32
	exited   bool
	status   string
	errMsg   string
}

var errProcessExited = errors.New("process has already exited")

func (p *process) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup signals the process's group (it leads its own group or
// session), so shells' children get the signal too. It falls back to the
// process alone if the group is gone.
func (p *process) signalGroup(sig unix.Signal) error {
	if p.isDone() {
		return errProcessExited
	}
	if err := unix.Kill(-int(p.pid), sig); err == nil {
		return nil
	}
	if err := unix.Kill(int(p.pid), sig); err != nil {
		return fmt.Errorf("signal pid %d: %w", p.pid, err)
	}
	return nil
}

func (p *process) writeInput(data []byte, toPTY bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isDone() {
		return errProcessExited
	}
	var dst *os.File
	switch {
	case toPTY && p.pty == nil:
		return errors.New("process has no PTY")
	case toPTY:
		dst = p.pty
	case p.pty != nil:
		// envd accepts stdin input for PTY processes by writing to the PTY.
		dst = p.pty
	case p.stdin == nil:
		return errors.New("stdin is not open (start the process with stdin: true)")
	default:
		dst = p.stdin
	}
	if _, err := dst.Write(data); err != nil {
		return fmt.Errorf("write input: %w", err)
	}
	return nil
}

func (p *process) closeStdin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pty != nil {
		return errors.New("process has a PTY; send Ctrl+D (0x04) instead")
	}
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return fmt.Errorf("close stdin: %w", err)
	}
	return nil
}

// processTable indexes running and recently exited processes.
type processTable struct {
	retention time.Duration
	maxExited int

	mu    sync.Mutex
	byPID map[uint32]*process
}

func newProcessTable(retention time.Duration, maxExited int) *processTable {
	return &processTable{retention: retention, maxExited: maxExited, byPID: map[uint32]*process{}}
}

// add indexes p; a retained record of an earlier process with a reused pid
// is replaced.
func (t *processTable) add(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byPID[p.pid] = p
}

func (t *processTable) byPIDLookup(pid uint32) (*process, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.byPID[pid]
	return p, ok
}

// byTag prefers a running process, then the most recently started.
func (t *processTable) byTag(tag string) (*process, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best *process
	for _, p := range t.byPID {
		if !p.hasTag || p.tag != tag {
			continue
		}
		if best == nil || better(p, best) {
			best = p
		}
	}
	return best, best != nil
}

func better(a, b *process) bool {
	if ad, bd := a.isDone(), b.isDone(); ad != bd {
		return !ad
	}
	return a.startedAt.After(b.startedAt)
}

// running returns running processes ordered by start time.
func (t *processTable) running() []*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*process
	for _, p := range t.byPID {
		if !p.isDone() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startedAt.Before(out[j].startedAt) })
	return out
}

const janitorInterval = 15 * time.Second

func (t *processTable) runJanitor(ctx context.Context) {
	ticker := time.NewTicker(janitorInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			t.prune(now)
		}
	}
}

// prune forgets exited processes older than the retention, and the oldest
// ones beyond maxExited.
func (t *processTable) prune(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var exited []*process
	for pid, p := range t.byPID {
		if !p.isDone() {
			continue
		}
		if now.Sub(p.exitedAt) > t.retention {
			delete(t.byPID, pid)
			continue
		}
		exited = append(exited, p)
	}
	if len(exited) <= t.maxExited {
		return
	}
	sort.Slice(exited, func(i, j int) bool { return exited[i].exitedAt.Before(exited[j].exitedAt) })
	for _, p := range exited[:len(exited)-t.maxExited] {
		delete(t.byPID, p.pid)
	}
}
