package agent

import (
	"sync"
	"time"
)

// outputKind says which stream a chunk of output came from.
type outputKind uint8

const (
	outputStdout outputKind = iota
	outputStderr
	outputPTY
)

// outputChunk is an immutable piece of output at an absolute offset.
type outputChunk struct {
	offset int64
	kind   outputKind
	data   []byte
}

func (c outputChunk) end() int64 { return c.offset + int64(len(c.data)) }

// outputLog holds a process's recent output as one ordered byte sequence
// (stdout, stderr and PTY interleaved in order of arrival) with absolute
// offsets. It backs both live streaming and X-Space-Output-Offset replay.
//
// Attached readers apply backpressure: append blocks while the slowest
// reader is more than limit bytes behind, so a reader that keeps up never
// loses bytes. A reader that makes no progress for slowTimeout is cut off
// (overrun) so it cannot block the process forever. With no readers the log
// is a plain ring that drops the oldest bytes.
type outputLog struct {
	limit       int
	slowTimeout time.Duration

	mu       sync.Mutex
	chunks   []outputChunk
	start    int64 // offset of the oldest held byte
	end      int64 // offset one past the newest byte
	closed   bool  // no more output will be appended
	changed  chan struct{}
	progress chan struct{}
	readers  map[*outputReader]struct{}
}

func newOutputLog(limit int, slowTimeout time.Duration) *outputLog {
	return &outputLog{
		limit:       limit,
		slowTimeout: slowTimeout,
		changed:     make(chan struct{}),
		progress:    make(chan struct{}),
		readers:     map[*outputReader]struct{}{},
	}
}

// broadcast wakes everyone waiting on *ch. Callers hold l.mu.
func broadcast(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}

// slowestLocked returns the smallest reader position, or -1 without readers.
func (l *outputLog) slowestLocked() int64 {
	slowest := int64(-1)
	for r := range l.readers {
		if slowest < 0 || r.pos < slowest {
			slowest = r.pos
		}
	}
	return slowest
}

// append adds output, blocking while an attached reader is too far behind.
func (l *outputLog) append(kind outputKind, data []byte) {
	if len(data) == 0 {
		return
	}
	data = append([]byte(nil), data...)
	l.mu.Lock()
	defer l.mu.Unlock()

	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		slowest := l.slowestLocked()
		if slowest < 0 || slowest == l.end || l.end+int64(len(data))-slowest <= int64(l.limit) {
			break
		}
		if deadline == nil {
			deadline = time.NewTimer(l.slowTimeout)
		}
		progress := l.progress
		l.mu.Unlock()
		select {
		case <-progress:
			l.mu.Lock()
			deadline.Reset(l.slowTimeout)
		case <-deadline.C:
			l.mu.Lock()
			l.cutOffLocked(l.slowestLocked())
			deadline = nil
		}
	}

	l.chunks = append(l.chunks, outputChunk{offset: l.end, kind: kind, data: data})
	l.end += int64(len(data))
	l.trimLocked()
	broadcast(&l.changed)
}

// cutOffLocked detaches the readers at position pos with an overrun.
func (l *outputLog) cutOffLocked(pos int64) {
	for r := range l.readers {
		if r.pos == pos {
			r.overrun = true
			delete(l.readers, r)
		}
	}
	broadcast(&l.changed)
}

// trimLocked drops the oldest bytes beyond the limit.
func (l *outputLog) trimLocked() {
	excess := l.end - l.start - int64(l.limit)
	for excess > 0 && len(l.chunks) > 0 {
		c := l.chunks[0]
		if int64(len(c.data)) <= excess {
			l.chunks = l.chunks[1:]
			excess -= int64(len(c.data))
			l.start = c.end()
			continue
		}
		cut := int(excess)
		l.chunks[0] = outputChunk{offset: c.offset + int64(cut), kind: c.kind, data: c.data[cut:]}
		l.start = l.chunks[0].offset
		excess = 0
	}
	if len(l.chunks) == 0 {
		l.start = l.end
	}
}

// close marks the end of output; readers drain what is held and finish.
func (l *outputLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		broadcast(&l.changed)
	}
}

// attach returns a reader positioned at offset from, or at the live end if
// from is negative. It also returns the reader's actual starting offset,
// which is later than from if those bytes were already dropped.
func (l *outputLog) attach(from int64) (*outputReader, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos := from
	switch {
	case from < 0 || from > l.end:
		pos = l.end
	case from < l.start:
		pos = l.start
	}
	r := &outputReader{log: l, pos: pos}
	l.readers[r] = struct{}{}
	return r, pos
}

// outputReader is one stream's cursor into an outputLog.
type outputReader struct {
	log     *outputLog
	pos     int64
	overrun bool
}

// readBatch is what a reader can act on right now.
type readBatch struct {
	chunks  []outputChunk
	done    bool            // log closed and fully read
	overrun bool            // reader fell too far behind and was cut off
	wait    <-chan struct{} // closed when there may be more to read
}

// next returns the held chunks from the reader's position on. It does not
// advance; call advance after the chunks were delivered.
func (r *outputReader) next() readBatch {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.overrun {
		return readBatch{overrun: true}
	}
	var out []outputChunk
	for _, c := range l.chunks {
		if c.end() <= r.pos {
			continue
		}
		if c.offset < r.pos {
			skip := r.pos - c.offset
			c = outputChunk{offset: r.pos, kind: c.kind, data: c.data[skip:]}
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		return readBatch{chunks: out}
	}
	if l.closed {
		return readBatch{done: true}
	}
	return readBatch{wait: l.changed}
}

// advance records that output up to offset was delivered, which may unblock
// a writer waiting on backpressure.
func (r *outputReader) advance(offset int64) {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset > r.pos {
		r.pos = offset
		broadcast(&l.progress)
	}
}

// detach removes the reader so it no longer holds back the writer.
func (r *outputReader) detach() {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.readers[r]; ok {
		delete(l.readers, r)
		broadcast(&l.progress)
	}
}
