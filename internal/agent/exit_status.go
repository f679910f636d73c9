package agent

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// The reaper gets raw wait statuses, not *os.ProcessState, so these mirror
// ProcessState.String, ExitCode and Exited exactly: envd reports them and the
// SDKs show them to users.

func (s exitStatus) String() string {
	ws := s.status
	var res string
	switch {
	case ws.Exited():
		res = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		res = "signal: " + ws.Signal().String()
	case ws.Stopped():
		res = "stop signal: " + ws.StopSignal().String()
		if ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() != 0 {
			res += " (trap " + strconv.Itoa(ws.TrapCause()) + ")"
		}
	case ws.Continued():
		res = "continued"
	}
	if ws.CoreDump() {
		res += " (core dumped)"
	}
	return res
}

// exitCode is the exit code, or -1 if the process was killed by a signal.
func (s exitStatus) exitCode() int {
	if !s.status.Exited() {
		return -1
	}
	return s.status.ExitStatus()
}

func (s exitStatus) exited() bool { return s.status.Exited() }
