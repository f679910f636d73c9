package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-platform/space/pkg/apiv1"
)

// Event is one decoded event of a session's output stream.
type Event struct {
	// Type is apiv1.EventStdout, EventStderr, EventPTY, EventTruncated or
	// EventExit; unknown types from a newer server are passed through.
	Type string
	// Data holds the output bytes of stdout/stderr/pty events (already
	// decoded from text or base64), and the raw event data of unknown types.
	Data []byte
	// Offset is the session output offset after this event: pass it to
	// Attach to continue from here later.
	Offset int64
	// ExitCode and Error are set by the exit event.
	ExitCode int
	Error    string
	// Truncated is set by the truncated event: output from Requested up to
	// From was dropped by the server before it could be read.
	Truncated *apiv1.TruncatedEvent
}

// AttachStream reads a session's output. When the connection drops before
// the exit event, Next reconnects with Last-Event-ID set to the offset of the
// last byte it returned, so every output byte is returned exactly once.
type AttachStream struct {
	stream *resumingStream
	// offset is the output offset after the last byte returned by Next.
	offset int64
	exited bool
}

// Attach opens the output stream of session sid from output offset from (0
// for the beginning of what the server still holds). The first connection is
// made before Attach returns so that a missing session fails here.
func (c *Client) Attach(ctx context.Context, id, sid string, from int64) (*AttachStream, error) {
	a := &AttachStream{offset: from}
	path := sandboxPath(id, "sessions", sid, "attach")
	reconnecting := false
	a.stream = c.newResumingStream(ctx, func(ctx context.Context) (*http.Request, error) {
		var query url.Values
		if !reconnecting && from > 0 {
			query = url.Values{"from": {strconv.FormatInt(from, 10)}}
		}
		req, err := c.newRequest(ctx, http.MethodGet, path, query, nil)
		if err != nil {
			return nil, err
		}
		if reconnecting {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(a.offset, 10))
		}
		reconnecting = true
		return req, nil
	})
	a.stream.frames = true
	if err := a.stream.connect(); err != nil {
		a.stream.close()
		return nil, err
	}
	return a, nil
}

// Offset is the output offset after the last byte returned by Next.
func (a *AttachStream) Offset() int64 { return a.offset }

// Next returns the next event. After the exit event it returns io.EOF. A
// dropped connection is reopened transparently; Next fails only when the
// context ends, the session is gone, or reconnecting keeps failing.
func (a *AttachStream) Next() (Event, error) {
	for {
		if a.exited {
			return Event{}, io.EOF
		}
		raw, err := a.stream.next()
		if err != nil {
			return Event{}, err
		}
		ev, deliver, err := a.decode(raw)
		if err != nil {
			return Event{}, err
		}
		if deliver {
			return ev, nil
		}
	}
}

// Close releases the connection. It may be called while Next is blocked in
// another goroutine, which then returns an error.
func (a *AttachStream) Close() error {
	a.stream.close()
	return nil
}

// decode turns a raw event into an Event and advances the resume offset.
// deliver is false for output the caller has already received, which a
// server may resend after a reconnect.
func (a *AttachStream) decode(raw sseEvent) (ev Event, deliver bool, err error) {
	end, hasOffset := int64(0), false
	if raw.HasID {
		if n, perr := strconv.ParseInt(raw.ID, 10, 64); perr == nil {
			end, hasOffset = n, true
		}
	}
	ev.Type = raw.Type
	switch raw.Type {
	case apiv1.EventStdout, apiv1.EventStderr, apiv1.EventPTY:
		data := raw.Data
		if !raw.Raw {
			var chunk apiv1.OutputChunk
			if err := json.Unmarshal(raw.Data, &chunk); err != nil {
				return Event{}, false, fmt.Errorf("decode %s event: %w", raw.Type, err)
			}
			data = []byte(chunk.Text)
			if chunk.Base64 != "" {
				if data, err = base64.StdEncoding.DecodeString(chunk.Base64); err != nil {
					return Event{}, false, fmt.Errorf("decode %s event: base64: %w", raw.Type, err)
				}
			}
		}
		if hasOffset {
			if end <= a.offset {
				return Event{}, false, nil // already delivered
			}
			if start := end - int64(len(data)); start < a.offset {
				data = data[a.offset-start:] // overlaps what was delivered
			}
			a.offset = end
		}
		ev.Data = data
	case apiv1.EventTruncated:
		var t apiv1.TruncatedEvent
		if err := json.Unmarshal(raw.Data, &t); err != nil {
			return Event{}, false, fmt.Errorf("decode truncated event: %w", err)
		}
		ev.Truncated = &t
		a.offset = max(a.offset, t.From)
		if hasOffset {
			a.offset = max(a.offset, end)
		}
	case apiv1.EventExit:
		var exit apiv1.ExitEvent
		if err := json.Unmarshal(raw.Data, &exit); err != nil {
			return Event{}, false, fmt.Errorf("decode exit event: %w", err)
		}
		ev.ExitCode, ev.Error = exit.ExitCode, exit.Error
		if hasOffset {
			a.offset = max(a.offset, end)
		}
		a.exited = true
		a.stream.close()
	default:
		ev.Data = raw.Data
		if hasOffset {
			a.offset = max(a.offset, end)
		}
	}
	ev.Offset = a.offset
	return ev, true, nil
}
