package client

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// frameReader reads an attach stream of binary output frames
// (apiv1.OutputFramesMediaType) as the events an event stream would carry.
type frameReader struct {
	in *bufio.Reader
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{in: bufio.NewReaderSize(r, 64<<10)}
}

// frameEvents names each frame kind's event; kinds not here are skipped.
var frameEvents = map[byte]string{
	apiv1.FrameStdout: apiv1.EventStdout, apiv1.FrameStderr: apiv1.EventStderr, apiv1.FramePTY: apiv1.EventPTY,
	apiv1.FrameTruncated: apiv1.EventTruncated, apiv1.FrameExit: apiv1.EventExit,
}

// Next returns the next event; keepalives and unknown kinds are skipped.
// A stream cut inside a frame ends like a clean end (io.EOF): the caller
// reconnects from the last offset it saw either way.
func (r *frameReader) Next() (sseEvent, error) {
	for {
		kind, offset, payload, err := apiv1.ReadFrame(r.in)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		if err != nil {
			return sseEvent{}, err
		}
		name, ok := frameEvents[kind]
		if !ok {
			continue
		}
		raw := kind == apiv1.FrameStdout || kind == apiv1.FrameStderr || kind == apiv1.FramePTY
		return sseEvent{Type: name, Data: payload, ID: strconv.FormatInt(offset, 10), HasID: true, Raw: raw}, nil
	}
}

func (r *frameReader) retry() time.Duration { return 0 }
