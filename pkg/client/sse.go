package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// sseEvent is one event of a text/event-stream, as dispatched by sseReader.
type sseEvent struct {
	// Type is the event: field, "message" when absent.
	Type string
	// Data is the data: lines joined with "\n".
	Data []byte
	// ID is the last event ID after this event (it persists across events,
	// as in the HTML specification); HasID says this event set it itself.
	ID    string
	HasID bool
	// Raw says Data of an output event is the output itself (a binary
	// frame), not the JSON of an apiv1.OutputChunk.
	Raw bool
}

// maxSSELine bounds one line so a broken server cannot exhaust memory; output
// chunks are far smaller than this even when base64-encoded.
const maxSSELine = 64 << 20

var errSSELineTooLong = fmt.Errorf("event stream line longer than %d bytes", maxSSELine)

// sseReader parses a text/event-stream following the HTML specification's
// rules: lines end in "\r\n", "\n" or "\r"; lines starting with ":" are
// comments (keepalives); "field: value" loses one leading space of value;
// several data: lines are joined with "\n"; a blank line dispatches; an
// event cut off by the end of the stream is discarded.
//
// One deliberate leniency: an event with an event: field but no data: line
// is dispatched with empty Data instead of being dropped.
type sseReader struct {
	in *bufio.Reader
	// skipLF is set after a "\r" so that a following "\n" is not read as a
	// second (blank) line.
	skipLF  bool
	started bool
	lastID  string
	// Retry is the last reconnection delay the server asked for (0 if none).
	Retry time.Duration
	line  []byte
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{in: bufio.NewReaderSize(r, 32<<10)}
}

func (r *sseReader) retry() time.Duration { return r.Retry }

// Next returns the next complete event. It returns io.EOF when the stream
// ends (cleanly or in the middle of an event) and the read error otherwise.
func (r *sseReader) Next() (sseEvent, error) {
	var (
		eventType string
		data      bytes.Buffer
		sawData   bool
		sawEvent  bool
		hasID     bool
	)
	for {
		line, err := r.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if !sawData && !sawEvent {
				// Blank line after only comments/ids/retries: nothing to dispatch.
				hasID = false
				continue
			}
			if eventType == "" {
				eventType = "message"
			}
			return sseEvent{Type: eventType, Data: bytes.TrimSuffix(data.Bytes(), []byte("\n")), ID: r.lastID, HasID: hasID}, nil
		}
		if line[0] == ':' {
			continue // comment, e.g. ": keepalive"
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			eventType, sawEvent = string(value), true
		case "data":
			data.Write(value)
			data.WriteByte('\n')
			sawData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 { // the spec ignores ids holding NUL
				r.lastID, hasID = string(value), true
			}
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				r.Retry = time.Duration(ms) * time.Millisecond
			}
		default:
			// Unknown fields are ignored, per the specification.
		}
	}
}

// readLine returns the next line without its terminator. A last line that
// is not terminated is dropped: the stream was cut and it is incomplete.
func (r *sseReader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		b, err := r.in.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		if r.skipLF {
			r.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return r.stripBOM(), nil
		case '\r':
			r.skipLF = true
			return r.stripBOM(), nil
		}
		r.line = append(r.line, b)
		if len(r.line) > maxSSELine {
			return nil, errSSELineTooLong
		}
	}
}

// stripBOM drops a UTF-8 byte order mark at the very start of the stream.
func (r *sseReader) stripBOM() []byte {
	if !r.started {
		r.started = true
		return bytes.TrimPrefix(r.line, []byte("\xEF\xBB\xBF"))
	}
	return r.line
}
