package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// spillNode is a node whose sessions spill into dir.
func spillNode(dir string, memory, spill int64, timeout time.Duration) *Node {
	return &Node{
		cfg: Config{
			SessionOutputLimit: memory, SessionSpillDir: dir, SessionSpillLimit: spill, SessionReaderTimeout: timeout,
		},
		log: slog.Default(),
	}
}

// spillJournal is a journal of session s1 of sandbox sb1 spilling into a
// directory of its own, which it returns.
func spillJournal(t *testing.T, memory, spill int64, timeout time.Duration) (*Journal, string) {
	t.Helper()
	dir := t.TempDir()
	j := newJournal(spillNode(dir, memory, spill, timeout).journalConfig("sb1", "s1"))
	t.Cleanup(j.Close)
	return j, dir
}

// recorded is output as it was appended: its bytes and, byte for byte,
// its stream.
type recorded struct {
	data    []byte
	streams []byte
}

func (r *recorded) append(j *Journal, s Stream, data []byte) {
	j.Append(s, data)
	r.data = append(r.data, data...)
	r.streams = append(r.streams, bytes.Repeat([]byte{byte(s)}, len(data))...)
}

// randomOutput appends total bytes in chunks of 1 byte to 64 KiB, of
// streams that change now and then, and returns what it appended.
func randomOutput(j *Journal, total int, seed uint64) *recorded {
	rng := rand.New(rand.NewPCG(seed, 1))
	bytesOf := rand.NewChaCha8([32]byte{byte(seed)})
	var out recorded
	s := Stdout
	for len(out.data) < total {
		n := min(1+rng.IntN(64<<10), total-len(out.data))
		data := make([]byte, n)
		_, _ = bytesOf.Read(data)
		if rng.IntN(4) == 0 {
			s = Stdout + Stream(rng.IntN(3))
		}
		out.append(j, s, data)
	}
	return &out
}

// followAll reads the journal from offset to its end and fails the test
// on any drop it did not expect (wantDrops: pairs of requested, first).
func followAll(t *testing.T, j *Journal, from int64, wantDrops ...[2]int64) ([]byte, []Chunk) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf bytes.Buffer
	var chunks []Chunk
	var drops [][2]int64
	_, err := j.Follow(ctx, from, func(r, f int64) error {
		drops = append(drops, [2]int64{r, f})
		return nil
	}, func(c Chunk) error {
		buf.Write(c.Data)
		chunks = append(chunks, Chunk{Stream: c.Stream, Offset: c.Offset, Data: nil})
		chunks[len(chunks)-1].Data = c.Data
		return nil
	})
	if err != nil {
		t.Fatalf("follow from %d: %v", from, err)
	}
	if fmt.Sprint(drops) != fmt.Sprint(wantDrops) {
		t.Fatalf("follow from %d: dropped %v, want %v", from, drops, wantDrops)
	}
	return buf.Bytes(), chunks
}

// checkStreams fails the test unless every chunk's bytes are of the
// stream they were appended on, at their offsets.
func checkStreams(t *testing.T, want *recorded, chunks []Chunk) {
	t.Helper()
	for _, c := range chunks {
		appended := want.streams[c.Offset : c.Offset+int64(len(c.Data))]
		if n := bytes.Count(appended, []byte{byte(c.Stream)}); n != len(c.Data) {
			t.Fatalf("%d bytes at %d came as %v, %d of them were appended on another stream", len(c.Data), c.Offset, c.Stream, len(c.Data)-n)
		}
	}
}

// 50 MiB through a journal that holds 1 MiB in memory read back from
// offset 0 (and from within the spill) byte for byte, each byte on its own
// stream, with nothing dropped; the spill file is the journal's, 0600.
func TestJournalSpillReadsBackByteExact(t *testing.T) {
	const total = 50 << 20
	j, dir := spillJournal(t, 1<<20, 64<<20, time.Minute)
	want := randomOutput(j, total, 1)
	j.Finish(End{ExitCode: 0})

	j.mu.Lock()
	held, spilled := j.held, j.diskEnd-j.first
	j.mu.Unlock()
	if held > 1<<20+64<<10 || spilled < total-held || spilled > 64<<20 {
		t.Fatalf("memory holds %d bytes, the spill %d; want at most 1 MiB and a chunk, and the rest", held, spilled)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "sb1", "s1-*"+spillSuffix))
	if len(files) != 1 {
		t.Fatalf("spill files %v, want one in the sandbox's directory", files)
	}
	for path, mode := range map[string]os.FileMode{files[0]: 0o600, filepath.Join(dir, "sb1"): 0o700} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: %v, %v; want mode %v", path, st.Mode(), err, mode)
		}
	}

	for _, from := range []int64{0, 12_345_678, total - 100} {
		got, chunks := followAll(t, j, from)
		if !bytes.Equal(got, want.data[from:]) {
			t.Fatalf("from %d: %d bytes back, want %d of what was appended", from, len(got), total-from)
		}
		checkStreams(t, want, chunks)
	}
}

// waitAttached waits until n readers follow j: output appended from then
// on waits for them.
func waitAttached(t testing.TB, j *Journal, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		j.mu.Lock()
		got := len(j.readers)
		j.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d readers attached, want %d", got, n)
		}
	}
}

// appendInBackground appends n chunks of size bytes, numbered, and
// returns what it appends and a channel closed when it is done.
func appendInBackground(j *Journal, n, size int) ([]byte, chan struct{}) {
	var all []byte
	for i := 0; i < n; i++ {
		all = append(all, bytes.Repeat([]byte{byte('a' + i%26)}, size)...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			j.Append(Stdout, all[i*size:(i+1)*size])
		}
	}()
	return all, done
}

// An attached reader that falls behind holds the appends back rather than
// lose output: Append blocks until the reader reads, then goes on, and the
// reader gets every byte.
func TestJournalSlowReaderHoldsAppendBack(t *testing.T) {
	const size, n = 4 << 10, 200 // 800 KiB through a journal of 64 + 64 KiB
	j, _ := spillJournal(t, 64<<10, 64<<10, time.Minute)
	gate := make(chan struct{})
	var got bytes.Buffer
	followed := make(chan error, 1)
	go func() {
		_, err := j.Follow(context.Background(), 0, func(r, f int64) error {
			return fmt.Errorf("dropped %d..%d", r, f)
		}, func(c Chunk) error {
			<-gate
			got.Write(c.Data)
			return nil
		})
		followed <- err
	}()
	waitAttached(t, j, 1)
	want, done := appendInBackground(j, n, size)

	// Held back at what the journal holds past the reader (which is in
	// its first chunk).
	var next int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		next, _, _ = j.Status()
		if next >= 128<<10 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Append went on past a reader that read nothing")
	default:
	}
	if now, _, _ := j.Status(); now != next || now > 128<<10+size {
		t.Fatalf("output at %d, then %d, while the reader read nothing; want it held at about 128 KiB", next, now)
	}

	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Append still blocked after the reader read")
	}
	j.Finish(End{})
	if err := <-followed; err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("reader: %v, %d bytes of %d", err, got.Len(), len(want))
	}
}

// A reader that makes no progress is cut off after the timeout: the
// appends go on without it (the oldest output is dropped), and its Follow
// returns ErrSlowReader, which names no host path.
func TestJournalStuckReaderIsCutOff(t *testing.T) {
	const timeout = 200 * time.Millisecond
	j, dir := spillJournal(t, 64<<10, 64<<10, timeout)
	stuck, release := make(chan struct{}), make(chan struct{})
	followed := make(chan error, 1)
	go func() {
		_, err := j.Follow(context.Background(), 0, nil, func(c Chunk) error {
			close(stuck)
			<-release
			return nil
		})
		followed <- err
	}()
	waitAttached(t, j, 1)
	j.Append(Stdout, []byte("first"))
	<-stuck
	start := time.Now()
	_, done := appendInBackground(j, 200, 4<<10)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Append still blocked on a stuck reader")
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("appends went past a stuck reader after %v, before the %v timeout", took, timeout)
	}
	if _, first, _ := j.Status(); first == 0 {
		t.Fatal("nothing dropped after the stuck reader was cut off")
	}
	close(release)
	err := <-followed
	if !errors.Is(err, ErrSlowReader) || strings.Contains(err.Error(), dir) {
		t.Fatalf("stuck reader's Follow = %v; want ErrSlowReader without the spill's path", err)
	}
}

// A reader that keeps reading, however slowly, is never cut off: the
// time runs from its last progress, not from when the append began to
// wait.
func TestJournalSlowButMovingReaderIsNotCutOff(t *testing.T) {
	j, _ := spillJournal(t, 8<<10, 8<<10, 200*time.Millisecond)
	followed := make(chan error, 1)
	var got int
	go func() {
		_, err := j.Follow(context.Background(), 0, func(r, f int64) error {
			return fmt.Errorf("dropped %d..%d", r, f)
		}, func(c Chunk) error {
			time.Sleep(50 * time.Millisecond)
			got += len(c.Data)
			return nil
		})
		followed <- err
	}()
	waitAttached(t, j, 1)
	// Chunks of alternate streams reach the reader one at a time, from
	// the spill too; the last append has the reader read 8 of them (0.4 s)
	// before it is done.
	want := 0
	for i := 0; i < 16; i++ {
		j.Append(Stdout+Stream(i%2), make([]byte, 1<<10))
		want += 1 << 10
	}
	j.Append(Stdout, make([]byte, 16<<10))
	want += 16 << 10
	j.Finish(End{})
	if err := <-followed; err != nil || got != want {
		t.Fatalf("slow reader: %v after %d bytes of %d", err, got, want)
	}
}

// Without a reader the oldest output goes past both bounds, and a reader
// that comes later is told exactly what went, gaps (Skip) included, even
// once they lie in the spill.
func TestJournalWithoutReaderDropsOldestExactly(t *testing.T) {
	j, _ := spillJournal(t, 10_000, 25_000, time.Minute)
	var want recorded
	for i := 0; i < 100; i++ {
		if i == 80 {
			j.Skip(80_500) // 80_000..80_500 lost upstream
			want.data = append(want.data, make([]byte, 500)...)
			want.streams = append(want.streams, make([]byte, 500)...)
		}
		want.append(j, Stdout+Stream(i/5%3), bytes.Repeat([]byte{byte(i)}, 1000))
	}
	j.Finish(End{})
	// 10 chunks in memory, 25_000 bytes in the spill.
	if next, first, _ := j.Status(); next != 100_500 || first != 100_500-35_000 {
		t.Fatalf("journal at %d..%d, want 65500..100500", first, next)
	}
	got, chunks := followAll(t, j, 0, [2]int64{0, 65_500}, [2]int64{80_000, 80_500})
	if wantData := append(append([]byte(nil), want.data[65_500:80_000]...), want.data[80_500:]...); !bytes.Equal(got, wantData) {
		t.Fatalf("read %d bytes, want the %d held", len(got), len(wantData))
	}
	checkStreams(t, &want, chunks)
	// From within what is held: nothing dropped but the gap.
	if got, _ := followAll(t, j, 70_000, [2]int64{80_000, 80_500}); len(got) != 30_000 {
		t.Fatalf("from 70000: %d bytes, want 30000", len(got))
	}
}

// Close removes the spill file: a reader still attached reads what memory
// holds and is told the rest went; nothing spills after.
func TestJournalCloseRemovesSpill(t *testing.T) {
	j, dir := spillJournal(t, 10_000, 1<<20, time.Minute)
	for i := 0; i < 50; i++ {
		j.Append(Stdout, bytes.Repeat([]byte{'x'}, 1000))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "sb1", "*")); len(files) != 1 {
		t.Fatalf("spill files before Close: %v, want one", files)
	}
	j.Close()
	if files, _ := filepath.Glob(filepath.Join(dir, "sb1", "*")); len(files) != 0 {
		t.Fatalf("spill files after Close: %v", files)
	}
	for i := 0; i < 50; i++ {
		j.Append(Stdout, bytes.Repeat([]byte{'y'}, 1000))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "sb1", "*")); len(files) != 0 {
		t.Fatalf("a closed journal spilled again: %v", files)
	}
	j.Finish(End{})
	if got, _ := followAll(t, j, 0, [2]int64{0, 90_000}); !bytes.Equal(got, bytes.Repeat([]byte{'y'}, 10_000)) {
		t.Fatalf("after Close: %d bytes", len(got))
	}
}

// fakeSpill is a spill in memory that fails its writes past failAt bytes
// written, as a full disk does.
type fakeSpill struct {
	mu      sync.Mutex
	data    []byte
	written int64
	failAt  int64
	closed  bool
}

func (f *fakeSpill) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.written+int64(len(p)) > f.failAt {
		return 0, &os.PathError{Op: "write", Path: "/secret/host/path", Err: syscall.ENOSPC}
	}
	f.written += int64(len(p))
	if need := off + int64(len(p)); need > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, need-int64(len(f.data)))...)
	}
	return copy(f.data[off:], p), nil
}

func (f *fakeSpill) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off+int64(len(p)) > int64(len(f.data)) {
		return 0, io.EOF
	}
	return copy(p, f.data[off:]), nil
}

func (f *fakeSpill) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// syncBuffer is a log destination tests read while the journal writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A spill that fails to write (a full disk) costs what it held, never the
// memory tail, and the journal goes on in memory with a warning; so does
// one that cannot be created.
func TestJournalSpillFailureKeepsMemoryTail(t *testing.T) {
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	spill := &fakeSpill{failAt: 32 << 10}
	j := newJournal(JournalConfig{
		Memory: 16 << 10, SpillLimit: 1 << 20, ReaderTimeout: time.Minute, Logger: logger,
		OpenSpill: func(want int64) (spillFile, int64, error) { return spill, want, nil },
	})
	// The 49th chunk of 1 KiB has the 33rd spill, which fails: the
	// spill's 32 KiB go, the 16 KiB memory tail stays.
	var want recorded
	for i := 0; i < 49; i++ {
		want.append(j, Stdout+Stream(i%2), bytes.Repeat([]byte{byte(i)}, 1<<10))
	}
	if next, first, _ := j.Status(); next != 49<<10 || first != 33<<10 {
		t.Fatalf("after the spill failed: %d..%d, want the memory tail %d..%d", first, next, 33<<10, 49<<10)
	}
	if !spill.closed || !strings.Contains(log.String(), "spill failed") || !strings.Contains(log.String(), "no space left") {
		t.Fatalf("spill closed %v; log:\n%s", spill.closed, log.String())
	}
	// It goes on, in memory.
	more := randomOutput(j, 1<<20, 2)
	want.data, want.streams = append(want.data, more.data...), append(want.streams, more.streams...)
	j.Finish(End{})
	next, first, _ := j.Status()
	j.mu.Lock()
	held, memFirst := j.held, j.chunks[0].Offset
	j.mu.Unlock()
	if next != 49<<10+1<<20 || first != memFirst || held > 16<<10 && len(j.chunks) > 1 {
		t.Fatalf("going on without a spill: %d..%d, %d bytes in memory from %d", first, next, held, memFirst)
	}
	got, chunks := followAll(t, j, first)
	if !bytes.Equal(got, want.data[first:]) {
		t.Fatalf("memory tail: %d bytes, want %d", len(got), next-first)
	}
	checkStreams(t, &want, chunks)

	// A spill directory that cannot be made: under a file.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := spillNode(notDir, 10_000, 1<<20, time.Minute)
	n.log = logger
	j = newJournal(n.journalConfig("sb1", "s1"))
	for i := 0; i < 30; i++ {
		j.Append(Stdout, bytes.Repeat([]byte{byte(i)}, 1000))
	}
	if next, first, _ := j.Status(); next != 30_000 || first != 20_000 {
		t.Fatalf("without a spill directory: %d..%d, want the memory tail 20000..30000", first, next)
	}
	if !strings.Contains(log.String(), "create the spill file") {
		t.Fatalf("no warning of the spill that could not be made:\n%s", log.String())
	}
}

// A spill write that fails while a reader is behind drops what the spill
// held, and only that, tells the reader, and the appends go on (held back
// by the reader in memory alone).
func TestJournalSpillFailureWithReaderDoesNotWedge(t *testing.T) {
	spill := &fakeSpill{failAt: 32 << 10}
	j := newJournal(JournalConfig{
		Memory: 16 << 10, SpillLimit: 1 << 20, ReaderTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OpenSpill: func(want int64) (spillFile, int64, error) { return spill, want, nil },
	})
	gate := make(chan struct{})
	var drops [][2]int64
	var got int64
	followed := make(chan error, 1)
	go func() {
		_, err := j.Follow(context.Background(), 0, func(r, f int64) error {
			drops = append(drops, [2]int64{r, f})
			got += f - r
			return nil
		}, func(c Chunk) error {
			<-gate
			got += int64(len(c.Data))
			return nil
		})
		followed <- err
	}()
	waitAttached(t, j, 1)
	all, done := appendInBackground(j, 100, 1<<10)
	time.Sleep(100 * time.Millisecond)
	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("appends wedged after the spill failed")
	}
	j.Finish(End{})
	// The reader had some of the first chunks in hand; what it missed
	// ends where the spill's 32 KiB did.
	if err := <-followed; err != nil || len(drops) != 1 || drops[0][1] != 32<<10 || got != int64(len(all)) {
		t.Fatalf("reader: %v, drops %v (want one, to %d), %d bytes accounted of %d", err, drops, 32<<10, got, len(all))
	}
}

// An append held back by a stuck reader goes on at once when the session
// ends or its journal is closed (the sandbox stops): the node's stream
// never hangs on a client.
func TestJournalEndReleasesHeldAppend(t *testing.T) {
	for _, how := range []string{"finish", "close"} {
		j, _ := spillJournal(t, 8<<10, 8<<10, time.Minute)
		stuck, release := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = j.Follow(context.Background(), 0, nil, func(c Chunk) error {
				select {
				case <-stuck:
				default:
					close(stuck)
				}
				<-release
				return nil
			})
		}()
		waitAttached(t, j, 1)
		j.Append(Stdout, []byte("x"))
		<-stuck
		_, done := appendInBackground(j, 40, 1<<10)
		select {
		case <-done:
			t.Fatalf("%s: appends went past a stuck reader within its timeout", how)
		case <-time.After(100 * time.Millisecond):
		}
		if how == "finish" {
			j.Finish(End{ExitCode: -1, Error: "sandbox stopped"})
		} else {
			j.Close()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: appends still held by a stuck reader", how)
		}
		close(release)
	}
}

// A journal that spilled travels whole with the suspend image; a node
// that holds less keeps the newest.
func TestSpilledJournalTravelsWithTheSuspendImage(t *testing.T) {
	mk := func(memory, spill int64) *Node {
		n := journalNode(t, memory)
		n.cfg.SessionSpillDir, n.cfg.SessionSpillLimit = t.TempDir(), spill
		return n
	}
	a, b, small := mk(64<<10, 1<<20), mk(64<<10, 1<<20), mk(64<<10, 128<<10)
	ctx := context.Background()
	const image = "sb1/suspend"
	mkCheckpoint(t, a, image, true)
	sb := a.newSandbox("sb1", "tok")
	a.register(sb)
	_, cancel := context.WithCancel(ctx)
	s := sb.addSession(41, SessionSpec{Cmd: []string{"out"}}, cancel)
	want := randomOutput(s.Journal, 700<<10, 3)
	s.finish(End{ExitCode: 3})
	sb.setSuspendImage(image)
	if _, first, _ := s.Journal.Status(); first != 0 {
		t.Fatalf("the sender's journal starts at %d", first)
	}

	for _, to := range []*Node{b, small} {
		if _, err := streamPipe(
			func(w io.Writer) error { return a.SendImage(ctx, image, w) },
			func(r io.Reader) error { return to.ReceiveImage(ctx, image, r) }); err != nil {
			t.Fatal(err)
		}
		dir, _ := to.imagePath(image)
		moved := to.newSandbox("sb1", "tok")
		if err := moved.importSessions(dir); err != nil {
			t.Fatal(err)
		}
		got, err := moved.Session(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		next, first, end := got.Journal.Status()
		wantFirst := int64(0)
		if to == small {
			wantFirst = next - 192<<10
		}
		if next != 700<<10 || end == nil || end.ExitCode != 3 || first < wantFirst || first > wantFirst+64<<10 {
			t.Fatalf("journal arrived at %d..%d ended %v; want from about %d to %d", first, next, end, wantFirst, 700<<10)
		}
		var drops [][2]int64
		if first > 0 {
			drops = append(drops, [2]int64{0, first})
		}
		out, chunks := followAll(t, got.Journal, 0, drops...)
		if !bytes.Equal(out, want.data[first:]) {
			t.Fatalf("%d bytes arrived from %d, want %d", len(out), first, next-first)
		}
		checkStreams(t, want, chunks)
		moved.discardSessions("done")
	}
}

// Spill files go with their sandbox's sessions (a rollback, a session
// replaced, the sandbox destroyed), and a node that starts removes those a
// previous process left; only spill files.
func TestSpillFilesGoWithTheirSessions(t *testing.T) {
	dir := t.TempDir()
	n := spillNode(dir, 1000, 1<<20, time.Minute)
	n.sandboxes = map[string]*Sandbox{}
	const id = "aaaaaaaaaaaaaaaaaaaa"
	sb := n.newSandbox(id, "tok")
	spilled := func(pid uint32) *Session {
		_, cancel := context.WithCancel(context.Background())
		s := sb.addSession(pid, SessionSpec{Cmd: []string{"x"}}, cancel)
		for i := 0; i < 3; i++ {
			s.Journal.Append(Stdout, make([]byte, 1000))
		}
		return s
	}
	count := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, id, "*"+spillSuffix))
		return len(files)
	}
	spilled(1)
	spilled(2)
	if got := count(); got != 2 {
		t.Fatalf("%d spill files for two sessions", got)
	}
	spilled(2) // the same pid again: a restore in place
	if got := count(); got != 2 {
		t.Fatalf("%d spill files after a session was replaced, want 2", got)
	}
	sb.dropSessions("rolled back")
	if got := count(); got != 0 {
		t.Fatalf("%d spill files after a rollback", got)
	}
	spilled(3)
	sb.discardSessions("sandbox stopped")
	if _, err := os.Stat(filepath.Join(dir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the sandbox's spill directory after its release: %v", err)
	}

	// Leftovers of a previous process, and what is not a spill file.
	for _, f := range []string{id + "/s1-1" + spillSuffix, id + "/s2-2" + spillSuffix, "bbbbbbbbbbbbbbbbbbbb/s1-3" + spillSuffix, "cccccccccccccccccccc/keep", "keep" + spillSuffix} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.sweepSpills()
	var left []string
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			left = append(left, rel)
		}
		return nil
	})
	if fmt.Sprint(left) != "[cccccccccccccccccccc/keep keep.spill]" {
		t.Fatalf("after the sweep: %v", left)
	}
	for _, d := range []string{id, "bbbbbbbbbbbbbbbbbbbb"} {
		if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("swept directory %s: %v", d, err)
		}
	}
}

// A spill directory among the volumes is refused.
func TestSpillDirOutsideVolumes(t *testing.T) {
	root := t.TempDir()
	vols := dirVolumes{root: filepath.Join(root, "volumes")}
	for dir, ok := range map[string]bool{
		filepath.Join(root, "node", "sessions"):          true,
		filepath.Join(root, "volumes-sessions"):          true,
		filepath.Join(root, "volumes"):                   false,
		filepath.Join(root, "volumes", "sandboxes", "x"): false,
		filepath.Join(root, "volumes", "..", "volumes"):  false,
		filepath.Join(root, "volumes", spillArea):        true,
		filepath.Join(root, "volumes", spillArea+"x"):    false,
	} {
		if err := checkSpillDir(dir, vols); (err == nil) != ok {
			t.Errorf("spill directory %s: %v", dir, err)
		} else if err != nil && strings.Contains(err.Error(), root) {
			t.Errorf("the refusal names the host path: %v", err)
		}
	}
}

// A started node sweeps the spill files of its predecessor, and a sandbox
// destroyed takes its spill files along. They are in the volumes' pool,
// not with the node's state.
func TestNodeSweepsSpillsAtStartAndDestroy(t *testing.T) {
	tb := newTwoBackendNode(t)
	// A spill the previous process left, and one of the release before,
	// which spilled into <state-dir>/sessions.
	stale := filepath.Join(tb.volumes, spillArea, "dddddddddddddddddddd", "s9-1"+spillSuffix)
	legacy := filepath.Join(tb.state, legacySpillDir, "eeeeeeeeeeeeeeeeeeee", "s3-1"+spillSuffix)
	for _, f := range []string{stale, legacy} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := tb.start(t)
	for _, f := range []string{stale, legacy} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a spill file of a previous process after start (%s): %v", f, err)
		}
	}
	if n.cfg.SessionSpillDir != filepath.Join(tb.volumes, spillArea) || n.cfg.SessionSpillLimit != defaultSessionSpillLimit ||
		n.cfg.SessionReaderTimeout != defaultReaderTimeout {
		t.Fatalf("spill defaults: %q, %d, %v", n.cfg.SessionSpillDir, n.cfg.SessionSpillLimit, n.cfg.SessionReaderTimeout)
	}

	ctx := context.Background()
	tpl := TemplateSpec{ID: "tpl", RootfsVolume: "templates/tpl", Runtimes: []string{runtime.GVisor}}
	if _, err := n.cfg.Volumes.Create(tpl.RootfsVolume); err != nil {
		t.Fatal(err)
	}
	const id = "aaaaaaaaaaaaaaaaaaaa"
	if err := n.Create(ctx, nodeapi.CreateRequest{Spec: CreateSpec{ID: id, Template: tpl, AccessToken: "t",
		Limits: runtime.Limits{VCPUs: 1, MemoryMB: 128}}, Warm: true}); err != nil {
		t.Fatal(err)
	}
	sb, err := n.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	_, cancel := context.WithCancel(ctx)
	s := sb.addSession(7, SessionSpec{Cmd: []string{"x"}}, cancel)
	for i := 0; i < 10; i++ {
		s.Journal.Append(Stdout, make([]byte, 1<<20)) // past the 8 MiB tail
	}
	if files, _ := filepath.Glob(filepath.Join(n.cfg.SessionSpillDir, id, "*")); len(files) != 1 {
		t.Fatalf("spill files of the sandbox: %v", files)
	}
	if err := n.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.SessionSpillDir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the destroyed sandbox's spill directory: %v", err)
	}
}

// spillBytes is what the spill files under dir take on disk.
func spillBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += max(info.Size(), info.Sys().(*syscall.Stat_t).Blocks*512)
		}
		return nil
	})
	return total
}

// The sessions of one sandbox spill at most SessionSpillPerSandbox
// together, however much they print: the first takes its whole spill and
// loses nothing of it, the next share what is left, the rest hold their
// memory tail alone; a closed journal gives its share back.
func TestSandboxSpillsAreBoundedTogether(t *testing.T) {
	const memory, perSession, perSandbox = 64 << 10, 2 << 20, 3 << 20
	dir := t.TempDir()
	n := spillNode(dir, memory, perSession, time.Minute)
	n.cfg.SessionSpillPerSandbox = perSandbox
	// printed is a journal of session of sandbox that printed mib MiB
	// with nobody reading.
	printed := func(sandbox, session string, mib int) *Journal {
		j := newJournal(n.journalConfig(sandbox, session))
		t.Cleanup(j.Close)
		for range mib * 4 {
			j.Append(Stdout, make([]byte, 256<<10))
		}
		return j
	}
	var journals []*Journal
	for i := range 4 {
		journals = append(journals, printed("sb1", fmt.Sprintf("s%d", i), 10))
	}
	if got := spillBytes(t, dir); got > perSandbox {
		t.Fatalf("the sandbox's sessions spilled %d bytes together, bound %d", got, perSandbox)
	}
	for i, wantHeld := range []int64{memory + perSession, memory + perSandbox - perSession, memory, memory} {
		next, first, _ := journals[i].Status()
		if held := next - first; held < wantHeld || held > wantHeld+256<<10 {
			t.Errorf("session %d holds %d bytes, want about %d", i, held, wantHeld)
		}
	}
	// Another sandbox has a budget of its own.
	if next, first, _ := printed("sb2", "s1", 5).Status(); next-first < memory+perSession {
		t.Fatalf("another sandbox's session holds %d bytes: the budget is not per sandbox", next-first)
	}
	// The first session's share comes back when it goes.
	journals[0].Close()
	if next, first, _ := printed("sb1", "s9", 5).Status(); next-first < memory+perSession {
		t.Fatalf("a session after one went holds %d bytes, want its whole spill", next-first)
	}
}
