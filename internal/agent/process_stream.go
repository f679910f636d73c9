package agent

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

const (
	keepaliveHeader           = "Keepalive-Ping-Interval"
	defaultKeepaliveInterval  = 90 * time.Second
	outputOffsetHeader        = "X-Space-Output-Offset"
	processDeadlineExceededMs = "process lifetime (Connect-Timeout-Ms) exceeded; process killed"
)

// keepaliveInterval reads the SDKs' Keepalive-Ping-Interval (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	if v := h.Get(keepaliveHeader); v != "" {
		if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
			return time.Duration(secs) * time.Second
		}
	}
	return defaultKeepaliveInterval
}

// requestedOffset parses X-Space-Output-Offset; -1 means live output only.
func requestedOffset(h http.Header) (int64, error) {
	v := h.Get(outputOffsetHeader)
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New(outputOffsetHeader+" must be a non-negative integer"))
	}
	return n, nil
}

// streamProcess sends start, output from reader, keepalives while idle, and
// finally the end event. It returns early (without touching the process)
// when ctx ends: a client going away must not kill the process.
//
// ownsLifetime is true for the Start stream whose Connect-Timeout-Ms bounds
// the process: if that deadline killed the process, the stream ends with
// deadline_exceeded instead of an end event, as envd does.
func streamProcess(ctx context.Context, p *process, reader *outputReader, keepalive time.Duration, ownsLifetime bool, send func(*processpb.ProcessEvent) error) error {
	defer reader.detach()
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{
		Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid},
	}}); err != nil {
		return err
	}

	idle := time.NewTimer(keepalive)
	defer idle.Stop()
	for {
		batch := reader.next()
		switch {
		case batch.overrun:
			return connect.NewError(connect.CodeDataLoss, errors.New("output reader fell behind and was cut off; reconnect with "+outputOffsetHeader))
		case len(batch.chunks) > 0:
			for _, c := range batch.chunks {
				if err := send(dataEvent(c)); err != nil {
					return err
				}
				reader.advance(c.end())
			}
			idle.Reset(keepalive)
			continue
		case batch.done:
			return sendEnd(ctx, p, ownsLifetime, send)
		}

		select {
		case <-ctx.Done():
			return streamContextError(ctx)
		case <-batch.wait:
		case <-idle.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{
				Keepalive: &processpb.ProcessEvent_KeepAlive{},
			}}); err != nil {
				return err
			}
			idle.Reset(keepalive)
		}
	}
}

func sendEnd(ctx context.Context, p *process, ownsLifetime bool, send func(*processpb.ProcessEvent) error) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		return streamContextError(ctx)
	}
	if ownsLifetime && p.deadlineExpiry {
		// envd ends a timed-out Start stream with deadline_exceeded, which
		// the SDKs turn into a TimeoutError, instead of an end event.
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New(processDeadlineExceededMs))
	}
	end := &processpb.ProcessEvent_EndEvent{
		ExitCode: p.end.exitCode,
		Exited:   p.end.exited,
		Status:   p.end.status,
	}
	if p.end.errMsg != "" {
		end.Error = &p.end.errMsg
	}
	return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}})
}

func streamContextError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("stream deadline (Connect-Timeout-Ms) exceeded"))
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

func dataEvent(c outputChunk) *processpb.ProcessEvent {
	data := &processpb.ProcessEvent_DataEvent{}
	switch c.kind {
	case outputStdout:
		data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: c.data}
	case outputStderr:
		data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: c.data}
	case outputPTY:
		data.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: c.data}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}}
}
