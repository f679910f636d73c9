package node

import (
	"context"
	"sort"
	"sync"
)

// Journal records a session's output so that readers can come and go, and
// resume from any offset still held, without ever blocking the process.
// It keeps at most limit bytes; older chunks are dropped from the front.
type Journal struct {
	mu      sync.Mutex
	chunks  []Chunk
	held    int64 // bytes in chunks
	next    int64 // offset one past the last byte recorded
	first   int64 // offset of the oldest byte still held
	limit   int64
	end     *End
	changed chan struct{}
}

// NewJournal returns an empty journal bounded to limit bytes.
func NewJournal(limit int64) *Journal {
	return &Journal{limit: limit, changed: make(chan struct{})}
}

// Append records output.
func (j *Journal) Append(s Stream, data []byte) {
	if len(data) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.chunks = append(j.chunks, Chunk{Stream: s, Offset: j.next, Data: append([]byte(nil), data...)})
	j.next += int64(len(data))
	j.held += int64(len(data))
	for j.held > j.limit && len(j.chunks) > 1 {
		j.held -= int64(len(j.chunks[0].Data))
		j.chunks[0] = Chunk{}
		j.chunks = j.chunks[1:]
	}
	if len(j.chunks) > 0 {
		j.first = j.chunks[0].Offset
	}
	j.notify()
}

// Skip moves the journal forward to offset: output before it was lost
// upstream. Readers see it as dropped. Offsets at or below the current end
// change nothing.
func (j *Journal) Skip(offset int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if offset <= j.next {
		return
	}
	j.next = offset
	if len(j.chunks) == 0 {
		j.first = offset
	}
	j.notify()
}

// Finish records the end of the process; no output follows it.
func (j *Journal) Finish(e End) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.end == nil {
		j.end = &e
		j.notify()
	}
}

func (j *Journal) notify() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// Status reports the offsets and the end, if any.
func (j *Journal) Status() (next, first int64, end *End) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next, j.first, j.end
}

// Read returns the output from offset on. If part of it was dropped, first
// is where the returned output starts (greater than offset). end is set once
// the process finished and everything after offset is in chunks.
func (j *Journal) Read(offset int64) (chunks []Chunk, first int64, end *End, changed <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	first = offset
	if offset < j.first {
		first = j.first
	}
	// Chunks are in offset order: skip the ones a reader has seen with a
	// binary search, or following a long output costs quadratic time.
	start := sort.Search(len(j.chunks), func(i int) bool {
		c := j.chunks[i]
		return c.Offset+int64(len(c.Data)) > first
	})
	for _, c := range j.chunks[start:] {
		if c.Offset < first {
			c = Chunk{Stream: c.Stream, Offset: first, Data: c.Data[first-c.Offset:]}
		}
		chunks = append(chunks, c)
	}
	return chunks, first, j.end, j.changed
}

// Follow calls fn for every chunk from offset on until the process ends
// (returns the End) or ctx is done. dropped is called once if output between
// offset and what is still held was lost.
func (j *Journal) Follow(ctx context.Context, offset int64, dropped func(requested, first int64) error, fn func(Chunk) error) (*End, error) {
	for {
		chunks, first, end, changed := j.Read(offset)
		if first > offset {
			if err := dropped(offset, first); err != nil {
				return nil, err
			}
			offset = first
		}
		for _, c := range chunks {
			if c.Offset > offset { // a gap left by Skip
				if err := dropped(offset, c.Offset); err != nil {
					return nil, err
				}
			}
			if err := fn(c); err != nil {
				return nil, err
			}
			offset = c.Offset + int64(len(c.Data))
		}
		if end != nil {
			return end, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}
