package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"connectrpc.com/connect"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
)

// processService implements process.Process (see doc.go for the output
// offset extension on Connect).
type processService struct {
	agent *Agent
}

var _ processpbconnect.ProcessHandler = (*processService)(nil)

func (s *processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	user, err := s.agent.userForRPC(req.Header())
	if err != nil {
		return err
	}
	// Unset means a pipe, for SDKs that predate the field (as in envd).
	stdin := req.Msg.Stdin == nil || req.Msg.GetStdin()
	opts := startOptions{
		config: req.Msg.GetProcess(),
		pty:    req.Msg.Pty,
		tag:    req.Msg.Tag,
		stdin:  stdin,
		user:   user,
	}
	// connect-go derived ctx's deadline from Connect-Timeout-Ms; envd makes
	// it the process's lifetime.
	if deadline, ok := ctx.Deadline(); ok {
		opts.deadline = deadline
	}
	p, reader, err := s.agent.startProcess(opts)
	if err != nil {
		return startError(err)
	}
	stream.ResponseHeader().Set(outputOffsetHeader, "0")
	return streamProcess(ctx, p, reader, keepaliveInterval(req.Header()), true, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	})
}

func startError(err error) error {
	switch {
	case errors.Is(err, errInvalidStart):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, errPermission), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOEXEC):
		return connect.NewError(connect.CodeInvalidArgument, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.agent.selectProcess(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	from, err := requestedOffset(req.Header())
	if err != nil {
		return err
	}
	reader, start := p.output.attach(from)
	if from >= 0 {
		stream.ResponseHeader().Set(outputOffsetHeader, strconv.FormatInt(start, 10))
	}
	return streamProcess(ctx, p, reader, keepaliveInterval(req.Header()), false, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

func (s *processService) List(context.Context, *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	running := s.agent.procs.running()
	out := make([]*processpb.ProcessInfo, 0, len(running))
	for _, p := range running {
		info := &processpb.ProcessInfo{Config: p.config, Pid: p.pid}
		if p.hasTag {
			info.Tag = &p.tag
		}
		out = append(out, info)
	}
	return connect.NewResponse(&processpb.ListResponse{Processes: out}), nil
}

func (s *processService) Update(_ context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := s.agent.selectProcess(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process has no PTY"))
		}
		if err := pty.Setsize(p.pty, &pty.Winsize{Rows: uint16(size.GetRows()), Cols: uint16(size.GetCols())}); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("resize pty: %w", err))
		}
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

func (s *processService) SendInput(_ context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := s.agent.selectProcess(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := writeProcessInput(p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func writeProcessInput(p *process, in *processpb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		err = p.writeInput(v.Stdin, false)
	case *processpb.ProcessInput_Pty:
		err = p.writeInput(v.Pty, true)
	default:
		return nil
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errProcessExited):
		return connect.NewError(connect.CodeNotFound, err)
	default:
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
}

// StreamInput takes a start event naming the process, then input events,
// written in order.
func (s *processService) StreamInput(_ context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *process
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			found, err := s.agent.selectProcess(ev.Start.GetProcess(), false)
			if err != nil {
				return nil, err
			}
			p = found
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("input before the start event"))
			}
			if err := writeProcessInput(p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *processpb.StreamInputRequest_Keepalive:
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

func (s *processService) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	p, err := s.agent.selectProcess(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	sig, err := signalFromProto(req.Msg.GetSignal())
	if err != nil {
		return nil, err
	}
	if err := p.signalGroup(sig); err != nil {
		if errors.Is(err, errProcessExited) || errors.Is(err, unix.ESRCH) {
			return nil, connect.NewError(connect.CodeNotFound, err)
		}
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// signalFromProto accepts the enum's values (which are the Linux numbers)
// and, as an extension, any other valid signal number.
func signalFromProto(s processpb.Signal) (unix.Signal, error) {
	n := int(s)
	if n <= 0 || n > 64 {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal %d", n))
	}
	return unix.Signal(n), nil
}

func (s *processService) CloseStdin(_ context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.agent.selectProcess(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// selectProcess resolves a ProcessSelector. Exited (retained) processes are
// returned only when includeExited is set; for control RPCs they are
// not_found, which the SDKs' kill() maps to false.
func (a *Agent) selectProcess(sel *processpb.ProcessSelector, includeExited bool) (*process, error) {
	var (
		p  *process
		ok bool
	)
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		p, ok = a.procs.byPIDLookup(v.Pid)
	case *processpb.ProcessSelector_Tag:
		p, ok = a.procs.byTag(v.Tag)
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
	if !ok || (!includeExited && p.isDone()) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s not found", selectorString(sel)))
	}
	return p, nil
}

func selectorString(sel *processpb.ProcessSelector) string {
	if tag, ok := sel.GetSelector().(*processpb.ProcessSelector_Tag); ok {
		return "with tag " + strconv.Quote(tag.Tag)
	}
	return "with pid " + strconv.FormatUint(uint64(sel.GetPid()), 10)
}
