package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Journal records a session's output so that readers can come and go and
// resume from any offset still held.
//
// The newest output is held in memory (JournalConfig.Memory bytes). Older
// output spills to a file of the journal's own, up to SpillLimit bytes,
// so that a reader that falls behind, or re-attaches at an old offset,
// still reads it in order from disk. Past both bounds the oldest output
// goes, unless an attached reader has not read it yet: then the append
// waits for that reader (back-pressure), which stops the node reading the
// agent's stream, which makes the agent hold the process. A reader that
// makes no progress for ReaderTimeout is cut off (Follow returns
// ErrSlowReader) and the output goes on without it. With no reader
// behind, the oldest output is dropped as it always was, and readers that
// come later are told (Follow's dropped).
//
// A failure of the spill file (a full disk) never costs the memory tail
// nor wedges the session: the journal forgets what was on disk, logs it,
// and goes on in memory alone.
type Journal struct {
	cfg JournalConfig

	mu     sync.Mutex
	chunks []Chunk // in memory, in offset order
	held   int64   // bytes in chunks
	next   int64   // offset one past the last byte recorded
	first  int64   // offset of the oldest byte still held (on disk or in memory)
	end    *End
	// changed is closed (and replaced) whenever there is more to read.
	changed chan struct{}

	// The spill: a ring of SpillLimit bytes in which offset o lies at
	// o % SpillLimit. It holds [first, diskEnd) when runs is not empty.
	spill    spillFile
	spillOff bool // no more spilling: not configured, failed or closed
	runs     []run
	diskEnd  int64

	readers map[*journalReader]struct{}
	// progress is closed (and replaced) when a waiting append may go on:
	// a reader advanced or left, the journal ended or closed.
	progress chan struct{}
	waiters  int
	closed   bool
}

// JournalConfig bounds a journal.
type JournalConfig struct {
	// Memory bounds the output held in memory (bytes); the newest chunk
	// is always held, whatever its size.
	Memory int64
	// SpillLimit bounds the output held on disk behind the memory tail
	// (bytes); with OpenSpill nil or SpillLimit ≤ 0 nothing spills.
	SpillLimit int64
	// OpenSpill creates the journal's spill file, at the first spill,
	// for up to want bytes, and returns how many it may hold: less when
	// what its sandbox's sessions may spill together is mostly taken
	// (the journal holds that much on disk, no more).
	OpenSpill func(want int64) (f spillFile, size int64, err error)
	// ReaderTimeout is how long an append waits for an attached reader
	// that makes no progress before cutting it off.
	ReaderTimeout time.Duration
	// Logger receives the spill's failures.
	Logger *slog.Logger
}

// spillFile is a journal's spill: read and written at offsets, removed
// by Close.
type spillFile interface {
	io.ReaderAt
	io.WriterAt
	Close() error
}

// run is a stretch of spilled output of one stream, from offset to the
// next run's (or diskEnd). Stream 0 marks a gap: output the journal never
// had (Skip).
type run struct {
	offset int64
	stream Stream
}

// journalReader is one Follow's position, which appends wait for.
type journalReader struct {
	pos int64
	cut error // set when cut off for making no progress
}

const (
	// defaultReaderTimeout is how long an append waits for a stuck
	// reader: less than the agent's own (agent.Config.SlowReaderTimeout,
	// 30 s), so that the node lets go of a stuck client first and goes
	// on reading the agent's stream, before the agent gives up on the
	// node's stream and drops output that every reader, the fast ones
	// too, would then miss.
	defaultReaderTimeout = 20 * time.Second
	// diskBatch bounds what one Read returns from the spill file: it
	// reads into fresh buffers under the journal's lock.
	diskBatch = 512 << 10
	// runBytes is the mean run length the spill is sized for: the index
	// of runs is in memory, and bounded to SpillLimit/runBytes entries
	// (16 bytes each: 4 MiB for a 256 MiB spill). Output that switches
	// streams more often than that holds less on disk; past the bound it
	// is treated as a full spill (back-pressure, or the oldest goes).
	runBytes = 1 << 10
)

// ErrSlowReader ends a Follow whose reader held the session's output back
// and made no progress for the journal's ReaderTimeout. The output went on
// without it; a reader re-attaching at its offset reads what is still
// held, and is told what is not.
var ErrSlowReader = errors.New("attach cut off: it made no progress while the session's output waited for it")

// closedChan is a Read's changed when there is more to read at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewJournal returns an empty journal bounded to limit bytes in memory,
// with no spill.
func NewJournal(limit int64) *Journal {
	return newJournal(JournalConfig{Memory: limit})
}

func newJournal(cfg JournalConfig) *Journal {
	if cfg.ReaderTimeout <= 0 {
		cfg.ReaderTimeout = defaultReaderTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Journal{
		cfg: cfg, changed: make(chan struct{}), progress: make(chan struct{}),
		spillOff: cfg.OpenSpill == nil || cfg.SpillLimit <= 0,
		readers:  map[*journalReader]struct{}{},
	}
}

// Append records output. It returns once the output is recorded, which is
// later than at once only while an attached reader has yet to read what
// the journal must let go of to hold it (see Journal).
func (j *Journal) Append(s Stream, data []byte) {
	if len(data) == 0 {
		return
	}
	j.add(s, append([]byte(nil), data...))
}

// add records data, which the journal keeps.
func (j *Journal) add(s Stream, data []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.chunks = append(j.chunks, Chunk{Stream: s, Offset: j.next, Data: data})
	j.next += int64(len(data))
	j.held += int64(len(data))
	// Readers learn of the chunk before trim may wait for them.
	j.notify()
	j.trim()
}

// trim moves the oldest output out of memory past the memory bound: into
// the spill, where the oldest goes past its bound, or, without a spill,
// away. Before anything an attached reader has not read goes it waits for
// the reader (waitFor), so the lock is released in between and the state
// is looked at afresh on every turn.
func (j *Journal) trim() {
	var w wait
	defer w.stop()
	for j.held > j.cfg.Memory && len(j.chunks) > 1 {
		c := j.chunks[0]
		spill := j.canSpill()
		keep := c.Offset + int64(len(c.Data)) // what must stay held
		if spill {
			keep = j.spillKeep(c)
		}
		if keep > j.first && !j.waitFor(keep, &w) {
			continue
		}
		if spill {
			j.dropDisk(keep)
			if err := j.spillChunk(c); err != nil {
				// c is still in memory: the next turn moves it on
				// without a spill.
				j.discardSpill("write the spill file", err)
				continue
			}
		}
		j.chunks[0] = Chunk{}
		j.chunks = j.chunks[1:]
		j.held -= int64(len(c.Data))
		j.resetFirst()
	}
}

// resetFirst makes first the oldest byte held, if any is.
func (j *Journal) resetFirst() {
	switch {
	case len(j.runs) > 0:
		j.first = j.runs[0].offset
	case len(j.chunks) > 0:
		j.first = j.chunks[0].Offset
	}
}

// wait is one trim's wait for its slowest reader.
type wait struct {
	timer   *time.Timer
	slowest int64
}

func (w *wait) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// waitFor reports whether output before keep may go: no attached reader
// still has to read it, or the journal ended or closed. Otherwise it
// waits, with the lock released, until a reader moves, the journal ends
// or the slowest reader is past its time and cut off, and reports false:
// the caller looks again.
func (j *Journal) waitFor(keep int64, w *wait) bool {
	if j.end != nil || j.closed {
		return true
	}
	slowest, behind := int64(0), false
	for r := range j.readers {
		if r.pos < keep && (!behind || r.pos < slowest) {
			slowest, behind = r.pos, true
		}
	}
	if !behind {
		return true
	}
	// The time runs from the first wait, and again whenever the slowest
	// reader moves: a reader that keeps reading is waited for as long as
	// it takes, which is the back-pressure.
	if w.timer == nil || slowest != w.slowest {
		w.stop()
		w.timer = time.NewTimer(j.cfg.ReaderTimeout)
		w.slowest = slowest
	}
	progress := j.progress
	j.waiters++
	j.mu.Unlock()
	select {
	case <-progress:
		j.mu.Lock()
	case <-w.timer.C:
		j.mu.Lock()
		j.cutOff(slowest, keep)
		w.timer = nil
	}
	j.waiters--
	return false
}

// cutOff detaches the readers at pos, which made no progress for
// ReaderTimeout while keep waited for them.
func (j *Journal) cutOff(pos, keep int64) {
	for r := range j.readers {
		if r.pos != pos {
			continue
		}
		r.cut = fmt.Errorf("%w for %s at offset %d, %d bytes behind (re-attach from there)",
			ErrSlowReader, j.cfg.ReaderTimeout, pos, j.next-pos)
		delete(j.readers, r)
	}
	j.cfg.Logger.Warn("cut off a session reader that made no progress", "offset", pos, "needed", keep, "timeout", j.cfg.ReaderTimeout)
	j.notify() // a reader waiting for output learns it at once
}

// canSpill reports whether c may go to the spill, opening it at the first
// spill.
func (j *Journal) canSpill() bool {
	if j.spillOff {
		return false
	}
	if j.spill == nil {
		f, size, err := j.cfg.OpenSpill(j.cfg.SpillLimit)
		if err != nil {
			j.discardSpill("create the spill file", err)
			return false
		}
		// Nothing is on disk yet: the ring takes its size now.
		j.spill, j.cfg.SpillLimit = f, min(size, j.cfg.SpillLimit)
	}
	return true
}

// spillKeep is the oldest offset the spill can still hold once c is
// written into it: its size bounds the bytes, maxRuns its index.
func (j *Journal) spillKeep(c Chunk) int64 {
	end := c.Offset + int64(len(c.Data))
	keep := end - j.cfg.SpillLimit
	add := 1 // runs c adds, at most
	if n := len(j.runs); n > 0 {
		switch {
		case c.Offset > j.diskEnd:
			add = 2 // a gap, then c
		case j.runs[n-1].stream == c.Stream:
			add = 0
		}
	}
	if over := len(j.runs) + add - j.maxRuns(); over > 0 {
		if over < len(j.runs) {
			keep = max(keep, j.runs[over].offset)
		} else {
			keep = max(keep, j.diskEnd)
		}
	}
	return keep
}

func (j *Journal) maxRuns() int {
	return int(max(j.cfg.SpillLimit/runBytes, 16))
}

// dropDisk lets the spilled output before keep go.
func (j *Journal) dropDisk(keep int64) {
	if len(j.runs) == 0 || keep <= j.first {
		return
	}
	if keep >= j.diskEnd {
		j.runs = nil
	} else {
		i := sort.Search(len(j.runs), func(i int) bool { return j.runs[i].offset > keep }) - 1
		j.runs = j.runs[i:]
		j.runs[0].offset = keep
		if j.runs[0].stream == 0 { // a gap is never last
			j.runs = j.runs[1:]
		}
	}
	j.resetFirst()
}

// spillChunk writes c, the oldest chunk in memory, into the spill, which
// has room for it (dropDisk). Of a chunk larger than the whole spill only
// its end is kept.
func (j *Journal) spillChunk(c Chunk) error {
	off, data := c.Offset, c.Data
	if over := int64(len(data)) - j.cfg.SpillLimit; over > 0 {
		off, data = off+over, data[over:]
	}
	if err := j.ringIO(off, data, j.spill.WriteAt); err != nil {
		return err
	}
	switch n := len(j.runs); {
	case n == 0:
		j.runs = append(j.runs, run{offset: off, stream: c.Stream})
	case off > j.diskEnd:
		j.runs = append(j.runs, run{offset: j.diskEnd}, run{offset: off, stream: c.Stream})
	case j.runs[n-1].stream != c.Stream:
		j.runs = append(j.runs, run{offset: off, stream: c.Stream})
	}
	j.diskEnd = off + int64(len(data))
	j.resetFirst()
	return nil
}

// ringIO reads or writes p at offset off of the ring, in two parts where
// it wraps.
func (j *Journal) ringIO(off int64, p []byte, op func([]byte, int64) (int, error)) error {
	size := j.cfg.SpillLimit
	for len(p) > 0 {
		pos := off % size
		n := min(int64(len(p)), size-pos)
		if _, err := op(p[:n], pos); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// discardSpill gives up the spill for good: the file goes, and with it
// the output it held, which readers are told of as dropped. The memory
// tail stays.
func (j *Journal) discardSpill(why string, err error) {
	if err != nil {
		lost := int64(0)
		if len(j.runs) > 0 {
			lost = j.diskEnd - j.first
		}
		j.cfg.Logger.Warn("session output spill failed: holding the output in memory only from now on, dropping the oldest",
			"op", why, "err", err, "lost_bytes", lost)
	}
	if j.spill != nil {
		if cerr := j.spill.Close(); cerr != nil {
			j.cfg.Logger.Warn("remove the session output spill", "err", cerr)
		}
		j.spill = nil
	}
	j.spillOff = true
	j.runs = nil
	j.resetFirst()
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

// Finish records the end of the process; no output follows it. An append
// waiting for a reader goes on at once.
func (j *Journal) Finish(e End) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.end == nil {
		j.end = &e
		j.notify()
		j.wake()
	}
}

// Close removes the journal's spill file, which is of use to nobody once
// its session is gone: readers still attached read what memory holds and
// are told the rest was dropped. The journal spills no more.
func (j *Journal) Close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	j.discardSpill("", nil)
	j.wake()
}

func (j *Journal) notify() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// wake lets waiting appends look again.
func (j *Journal) wake() {
	if j.waiters > 0 {
		close(j.progress)
		j.progress = make(chan struct{})
	}
}

// Status reports the offsets and the end, if any.
func (j *Journal) Status() (next, first int64, end *End) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next, j.first, j.end
}

// Read returns output from offset on: what memory holds, or a batch from
// the spill file. If part of it was dropped, first is where the returned
// output starts (greater than offset). end is set once the process
// finished and everything after offset is in chunks. changed is closed
// when there may be more to read: at once if chunks stop short of what is
// held.
func (j *Journal) Read(offset int64) (chunks []Chunk, first int64, end *End, changed <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	first = max(offset, j.first)
	if len(j.runs) > 0 && first < j.diskEnd {
		chunks, err := j.readDisk(first)
		if err == nil {
			return chunks, first, nil, closedChan
		}
		j.discardSpill("read the spill file", err)
		first = max(offset, j.first)
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

// readDisk reads up to diskBatch bytes of spilled output from from on
// (which is held), with one read for each stretch between gaps.
func (j *Journal) readDisk(from int64) ([]Chunk, error) {
	runEnd := func(i int) int64 {
		if i+1 < len(j.runs) {
			return j.runs[i+1].offset
		}
		return j.diskEnd
	}
	i := sort.Search(len(j.runs), func(i int) bool { return runEnd(i) > from })
	var chunks []Chunk
	budget := int64(diskBatch)
	for i < len(j.runs) && budget > 0 {
		if j.runs[i].stream == 0 {
			i++
			continue
		}
		// The stretch of runs i..k-1, up to the next gap or the budget.
		start := max(from, j.runs[i].offset)
		k, stop := i, start
		for k < len(j.runs) && j.runs[k].stream != 0 && stop-start < budget {
			stop = min(runEnd(k), start+budget)
			k++
		}
		buf := make([]byte, stop-start)
		if err := j.ringIO(start, buf, j.spill.ReadAt); err != nil {
			return nil, err
		}
		for ; i < k; i++ {
			lo, hi := max(start, j.runs[i].offset), min(stop, runEnd(i))
			chunks = append(chunks, Chunk{Stream: j.runs[i].stream, Offset: lo, Data: buf[lo-start : hi-start : hi-start]})
		}
		budget -= stop - start
		if stop < runEnd(k-1) {
			break // the budget ran out inside run k-1
		}
	}
	return chunks, nil
}

// attach registers a reader at offset, or at the oldest byte held if that
// is later: appends wait for it from now on.
func (j *Journal) attach(offset int64) *journalReader {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := &journalReader{pos: max(offset, j.first)}
	j.readers[r] = struct{}{}
	return r
}

// detach forgets a reader.
func (j *Journal) detach(r *journalReader) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.readers, r)
	j.wake()
}

// advance records that r has read up to pos, or returns why it was cut off.
func (j *Journal) advance(r *journalReader, pos int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r.cut != nil {
		return r.cut
	}
	if pos > r.pos {
		r.pos = pos
		j.wake()
	}
	return nil
}

// Follow calls fn for every chunk from offset on until the process ends
// (returns the End) or ctx is done. dropped is called if output between
// offset and what is still held was lost. While it follows, appends wait
// for it rather than drop what it has not read, until it makes no progress
// for the journal's ReaderTimeout: then it returns an error wrapping
// ErrSlowReader.
func (j *Journal) Follow(ctx context.Context, offset int64, dropped func(requested, first int64) error, fn func(Chunk) error) (*End, error) {
	r := j.attach(offset)
	defer j.detach(r)
	gap := func(from, to int64) error {
		if dropped != nil {
			if err := dropped(from, to); err != nil {
				return err
			}
		}
		return j.advance(r, to)
	}
	for {
		chunks, first, end, changed := j.Read(offset)
		if err := j.advance(r, offset); err != nil {
			return nil, err
		}
		if first > offset {
			if err := gap(offset, first); err != nil {
				return nil, err
			}
			offset = first
		}
		for _, c := range chunks {
			if c.Offset > offset { // a gap left by Skip
				if err := gap(offset, c.Offset); err != nil {
					return nil, err
				}
			}
			if err := fn(c); err != nil {
				return nil, err
			}
			offset = c.Offset + int64(len(c.Data))
			if err := j.advance(r, offset); err != nil {
				return nil, err
			}
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
