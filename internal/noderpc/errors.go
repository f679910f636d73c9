package noderpc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

// How errors cross the wire: the server answers a node's error with a
// Connect error whose message is the error's own text and whose detail, a
// NodeError, names the nodeapi sentinel it wraps (kind) or carries an
// *AgentError's status. The client rebuilds an error with the same text
// that unwraps to the same sentinel or to an equal *AgentError, so
// errors.Is and errors.As work as they do in process. The Connect code is
// chosen to match, for clients that only look at codes.

// Error kinds of NodeError.
const (
	kindNoSandbox   = "no_sandbox"
	kindNoSession   = "no_session"
	kindExecTimeout = "exec_timeout"
	kindNoEgress    = "no_egress"
	kindInvalidName = "invalid_name"
	kindExists      = "exists"
	kindNoRuntime   = "no_runtime"
	kindNoCkpt      = "no_checkpoint"
	kindSessions    = "too_many_sessions"
	kindSessionSpec = "session_spec"
	kindAgent       = "agent"
)

var sentinels = []struct {
	kind string
	err  error
	code connect.Code
}{
	{kindNoSandbox, nodeapi.ErrNoSandbox, connect.CodeNotFound},
	{kindNoSession, nodeapi.ErrNoSession, connect.CodeNotFound},
	{kindExecTimeout, nodeapi.ErrExecTimeout, connect.CodeDeadlineExceeded},
	{kindNoEgress, nodeapi.ErrNoEgress, connect.CodeFailedPrecondition},
	{kindInvalidName, nodeapi.ErrInvalidName, connect.CodeInvalidArgument},
	{kindExists, nodeapi.ErrExists, connect.CodeAlreadyExists},
	{kindNoRuntime, nodeapi.ErrNoRuntime, connect.CodeFailedPrecondition},
	{kindNoCkpt, nodeapi.ErrNoCheckpoint, connect.CodeFailedPrecondition},
	{kindSessions, nodeapi.ErrTooManySessions, connect.CodeResourceExhausted},
	{kindSessionSpec, nodeapi.ErrSessionSpec, connect.CodeInvalidArgument},
}

// describe classifies err for the wire: its NodeError detail and the
// Connect code that fits it.
func describe(err error) (*pb.NodeError, connect.Code) {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return &pb.NodeError{Kind: s.kind}, s.code
		}
	}
	var ae *nodeapi.AgentError
	if errors.As(err, &ae) {
		return &pb.NodeError{Kind: kindAgent, Status: int32(ae.Status), AgentMessage: ae.Message}, statusCode(ae.Status)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &pb.NodeError{}, connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return &pb.NodeError{}, connect.CodeDeadlineExceeded
	}
	return &pb.NodeError{}, connect.CodeUnknown
}

// statusCode is the Connect code closest to an agent's HTTP status.
func statusCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeAlreadyExists
	case http.StatusInsufficientStorage, http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	}
	return connect.CodeUnknown
}

// wireError turns a node's error into the Connect error the server answers.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	detail, code := describe(err)
	out := connect.NewError(code, errors.New(err.Error()))
	if d, derr := connect.NewErrorDetail(detail); derr == nil {
		out.AddDetail(d)
	}
	return out
}

// remoteError is a node's error rebuilt on the client: the node's message,
// unwrapping to the sentinel or *AgentError it wrapped there.
type remoteError struct {
	msg   string
	cause error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.cause }

// rebuild makes the client-side error for what the node answered: kind,
// status and agent message from a NodeError, msg its text. cause is kept
// for errors of no known kind.
func rebuild(msg string, d *pb.NodeError, cause error) error {
	if d.GetKind() == kindAgent {
		ae := &nodeapi.AgentError{Status: int(d.GetStatus()), Message: d.GetAgentMessage()}
		if msg == ae.Message {
			return ae
		}
		return &remoteError{msg: msg, cause: ae}
	}
	for _, s := range sentinels {
		if d.GetKind() == s.kind {
			return &remoteError{msg: msg, cause: s.err}
		}
	}
	return &remoteError{msg: msg, cause: cause}
}

// nodeError rebuilds the error a node answered a call with. Errors that did
// not come from the node (the transport, the token check) have no detail;
// they come back as they are.
func nodeError(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ne, ok := v.(*pb.NodeError); ok {
			return rebuild(ce.Message(), ne, ce)
		}
	}
	return err
}

// unanswered reports whether err says the node did not answer a call:
// nothing listens at its address, the connection broke, or Connect gave
// up reaching it. A call the caller cancelled is not one.
func unanswered(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// unansweredError is a call the node did not answer. Its text names the
// node only; the transport's error (with the node's address) stays behind
// Unwrap, for logs and errors.Is.
type unansweredError struct {
	node     string
	sentinel error
	cause    error
}

func (e *unansweredError) Error() string   { return "node " + e.node + " does not answer" }
func (e *unansweredError) Unwrap() []error { return []error{e.sentinel, e.cause} }
