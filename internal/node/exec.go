package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

// headBuffer keeps the first max bytes written to it and counts the rest.
type headBuffer struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (h *headBuffer) write(p []byte) {
	if room := h.max - h.buf.Len(); room < len(p) {
		h.dropped += int64(len(p) - max(room, 0))
		p = p[:max(room, 0)]
	}
	h.buf.Write(p)
}

// Exec runs a command to completion and returns its output. The timeout is
// sent to the agent as the process's lifetime.
func (sb *Sandbox) Exec(ctx context.Context, spec ExecSpec) (*ExecResult, error) {
	if len(spec.Cmd) == 0 {
		return nil, errors.New("empty command")
	}
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	req := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: spec.Cmd[0], Args: spec.Cmd[1:], Envs: spec.Env},
	}
	if spec.Cwd != "" {
		req.Process.Cwd = &spec.Cwd
	}
	creq := connect.NewRequest(req)
	setUser(creq.Header(), spec.User)
	stream, err := sb.Agent.Process.Start(ctx, creq)
	if err != nil {
		return nil, fmt.Errorf("exec %q: %w", spec.Cmd[0], err)
	}
	defer stream.Close()
	var res ExecResult
	stdout, stderr := headBuffer{max: MaxExecOutput}, headBuffer{max: MaxExecOutput}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			stdout.write(d.GetStdout())
			stderr.write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			res.ExitCode = int(e.GetExitCode())
			res.Stdout, res.Stderr = stdout.buf.Bytes(), stderr.buf.Bytes()
			res.Truncated = stdout.dropped > 0 || stderr.dropped > 0
			if res.ExitCode == 0 && !e.GetExited() && e.GetError() != "" {
				return nil, fmt.Errorf("exec %q: %s", spec.Cmd[0], e.GetError())
			}
			return &res, nil
		}
	}
	err = stream.Err()
	if bad := startRefused(err, spec.User); bad != nil {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("exec %q: %s", spec.Cmd[0], bad.Message())}
	}
	if connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("exec %q: %w", spec.Cmd[0], ErrExecTimeout)
	}
	if err == nil {
		err = errors.New("stream ended without an exit status")
	}
	return nil, &AgentError{Status: http.StatusBadGateway, Message: fmt.Sprintf(
		"exec %q: lost the sandbox's agent before the command ended (is the sandbox still running?): %v", spec.Cmd[0], err)}
}

// startRefused returns the agent's refusal to start a command for a reason
// in the request (unknown user, missing program or cwd, permission), which
// is the client's to fix, or nil for any other failure.
func startRefused(err error, user string) *connect.Error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeNotFound:
		return ce
	case connect.CodeUnauthenticated:
		// The node always sends the right token, so the agent refuses
		// only the user the request selected.
		if user != "" {
			return ce
		}
	}
	return nil
}

// setUser selects the user a request runs as, the way E2B's SDKs do.
func setUser(h http.Header, user string) {
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}
