package apiv1

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// OutputFramesMediaType is the attach stream's binary alternative to
// text/event-stream, for a client that says it accepts it: output bytes go
// as they are, where an event stream spends most of a fast stream's CPU
// escaping them into JSON (and base64) and the client unescaping them.
//
// The stream is a sequence of frames, each
//
//	kind     1 byte: FrameStdout, FrameStderr, FramePTY, FrameTruncated,
//	         FrameExit or FrameKeepalive
//	offset   8 bytes, big-endian: the output offset after the frame (what
//	         an event's id is in the event stream; resume with ?from=)
//	length   4 bytes, big-endian: the payload's length
//	payload  output bytes; the JSON of a TruncatedEvent or ExitEvent; none
//	         for a keepalive
//
// A client that meets a kind it does not know skips the frame.
const OutputFramesMediaType = "application/vnd.space.output-frames"

// Frame kinds of OutputFramesMediaType.
const (
	FrameStdout    byte = 'o'
	FrameStderr    byte = 'e'
	FramePTY       byte = 'p'
	FrameTruncated byte = 't'
	FrameExit      byte = 'x'
	FrameKeepalive byte = 'k'
)

// frameHeaderSize is kind + offset + length.
const frameHeaderSize = 1 + 8 + 4

// MaxFramePayload bounds one frame's payload, so that a broken peer cannot
// make a reader allocate without limit; output chunks are far smaller.
const MaxFramePayload = 64 << 20

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, kind byte, offset int64, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return fmt.Errorf("output frame of %d bytes: more than %d", len(payload), MaxFramePayload)
	}
	var hdr [frameHeaderSize]byte
	hdr[0] = kind
	binary.BigEndian.PutUint64(hdr[1:9], uint64(offset))
	binary.BigEndian.PutUint32(hdr[9:13], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ErrFrameTooLarge is returned by ReadFrame for a payload longer than
// MaxFramePayload.
var ErrFrameTooLarge = errors.New("output frame larger than allowed")

// ReadFrame reads one frame. It returns io.EOF at a clean end between
// frames and io.ErrUnexpectedEOF for a stream cut inside one.
func ReadFrame(r io.Reader) (kind byte, offset int64, payload []byte, err error) {
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[9:13])
	if n > MaxFramePayload {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return hdr[0], int64(binary.BigEndian.Uint64(hdr[1:9])), payload, nil
}
