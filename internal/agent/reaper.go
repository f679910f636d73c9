package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// exitStatus is what wait4 reported for a child.
type exitStatus struct {
	status unix.WaitStatus
}

// reaper is the only place the agent waits for children. os/exec's Wait is
// never used: as PID 1 the agent must also reap reparented orphans, and a
// wait4(-1) loop racing with exec.Cmd.Wait would steal exit statuses.
// Instead spawners register each child's pid with a callback, and the reaper
// dispatches every status it collects.
//
// Registration is race-free because spawn holds r.mu across fork and
// registration, and the reaper holds r.mu while it collects: a child that
// exits instantly is either already registered or collected only after its
// registration.
//
// With reapAll false (the agent is not PID 1, e.g. in tests) the reaper waits
// only for registered pids, so it never steals statuses from other code in
// the same process that runs children.
type reaper struct {
	reapAll bool
	log     *slog.Logger

	mu      sync.Mutex
	waiters map[int]func(exitStatus)
	kick    chan struct{}
}

// reaperPollInterval is a fallback for the SIGCHLD notification, which
// coalesces and could in theory be missed while the handler is not
// installed yet.
const reaperPollInterval = time.Second

func newReaper(reapAll bool, log *slog.Logger) *reaper {
	return &reaper{reapAll: reapAll, log: log, waiters: map[int]func(exitStatus){}, kick: make(chan struct{}, 1)}
}

// spawn runs start (which forks the child and returns its pid) and registers
// onExit for that pid atomically with respect to reaping.
func (r *reaper) spawn(start func() (int, error), onExit func(exitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	r.nudge()
	return pid, nil
}

func (r *reaper) nudge() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *reaper) run(ctx context.Context) {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	defer signal.Stop(sigchld)
	ticker := time.NewTicker(reaperPollInterval)
	defer ticker.Stop()
	for {
		r.reapOnce()
		select {
		case <-ctx.Done():
			return
		case <-sigchld:
		case <-r.kick:
		case <-ticker.C:
		}
	}
}

// reapOnce collects every child that has exited so far and dispatches the
// statuses outside the lock, so callbacks may take other locks.
func (r *reaper) reapOnce() {
	type reaped struct {
		pid    int
		status exitStatus
		notify func(exitStatus)
	}
	var done []reaped

	r.mu.Lock()
	if r.reapAll {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break // ECHILD: no children; 0: none exited yet
			}
			notify := r.waiters[pid]
			delete(r.waiters, pid)
			done = append(done, reaped{pid, exitStatus{ws}, notify})
		}
	} else {
		for pid, notify := range r.waiters {
			var ws unix.WaitStatus
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				got, err = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
			switch {
			case err != nil:
				// ECHILD: someone else reaped it; report it as lost
				// rather than waiting forever.
				delete(r.waiters, pid)
				done = append(done, reaped{pid, exitStatus{unix.WaitStatus(0xff00)}, notify})
				r.log.Warn("child vanished before it was reaped", "pid", pid, "err", err)
			case got == pid:
				delete(r.waiters, pid)
				done = append(done, reaped{pid, exitStatus{ws}, notify})
			}
		}
	}
	r.mu.Unlock()

	for _, d := range done {
		if d.notify == nil {
			r.log.Debug("reaped orphan", "pid", d.pid, "status", d.status.status)
			continue
		}
		d.notify(d.status)
	}
}
