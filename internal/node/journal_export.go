package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// A suspended sandbox's sessions live in the node's handle, not in its
// checkpoint image: the image holds the processes, the handle what they
// printed. When the image moves to another node (a drain), the journals
// travel in it as two files written next to the checkpoint, before the
// completeness marker: sessionsFile describes every session and where its
// chunks lie in sessionsDataFile, which holds their bytes back to back.
// The receiving node rebuilds the sessions from them when it resumes the
// sandbox without a handle of its own, so that an attach by offset goes on
// where it was and the processes are followed from the end of their
// journals (the restored agent replays what came after).
const (
	sessionsFile     = "space-sessions.json"
	sessionsDataFile = "space-sessions.data"
	// maxExportedSessions bounds what an image may make the node follow.
	maxExportedSessions = 4096
)

// exportedSessions is sessionsFile.
type exportedSessions struct {
	Sessions []exportedSession `json:"sessions"`
}

type exportedSession struct {
	// SessionInfo's OutputBytes and DroppedBytes are the journal's next
	// and first offsets (see Journal); its ID is derived from PID again.
	nodeapi.SessionInfo
	Chunks []exportedChunk `json:"chunks"`
}

// exportedChunk is one chunk of a journal; its Size bytes follow the
// previous chunk's in sessionsDataFile.
type exportedChunk struct {
	Stream Stream `json:"stream"`
	Offset int64  `json:"offset"`
	Size   int    `json:"size"`
}

// exportTo writes the output the journal holds to w, in order, spilled
// output included, and returns where each chunk lies and the offsets and
// end it had when it began. It follows the journal like a reader, so
// appends meanwhile (there are none while its sandbox is suspended) wait
// for it rather than drop what it has yet to write.
func (j *Journal) exportTo(w io.Writer) (chunks []exportedChunk, next, first int64, end *End, err error) {
	j.mu.Lock()
	next, first = j.next, j.first
	if j.end != nil {
		e := *j.end
		end = &e
	}
	r := &journalReader{pos: first}
	j.readers[r] = struct{}{}
	j.mu.Unlock()
	defer j.detach(r)
	for at := first; at < next; {
		batch, _, _, _ := j.Read(at)
		if err := j.advance(r, at); err != nil {
			return nil, 0, 0, nil, err
		}
		if len(batch) == 0 {
			break // the rest was skipped
		}
		for _, c := range batch {
			if c.Offset >= next {
				break
			}
			data := c.Data[:min(int64(len(c.Data)), next-c.Offset)]
			if _, err := w.Write(data); err != nil {
				return nil, 0, 0, nil, err
			}
			chunks = append(chunks, exportedChunk{Stream: c.Stream, Offset: c.Offset, Size: len(data)})
			at = c.Offset + int64(len(data))
		}
		if batch[len(batch)-1].Offset >= next {
			break
		}
	}
	return chunks, next, first, end, nil
}

// restoreChunk appends an imported chunk at its offset, data kept as is.
func (j *Journal) restoreChunk(c Chunk) {
	j.Skip(c.Offset)
	j.add(c.Stream, c.Data)
}

// setSuspendImage records the image the sandbox was suspended into (""
// once it runs again), so that a send of that image carries its sessions.
func (sb *Sandbox) setSuspendImage(image string) {
	sb.mu.Lock()
	sb.suspendImage = image
	sb.mu.Unlock()
}

// suspendedInto returns the handle of the sandbox suspended into image.
func (n *Node) suspendedInto(image string) *Sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sb := range n.sandboxes {
		sb.mu.Lock()
		match := sb.suspendImage == image
		sb.mu.Unlock()
		if match {
			return sb
		}
	}
	return nil
}

// exportSessions writes the sessions of the sandbox suspended into image
// (in dir) into the image, replacing those an earlier send or receive left
// there. An image of no sandbox this node holds keeps what it carries: a
// suspended sandbox that moved here and moves on takes its journals along.
func (n *Node) exportSessions(image, dir string) error {
	sb := n.suspendedInto(image)
	if sb == nil {
		return nil
	}
	var exp exportedSessions
	// The data file first: a sessions file always finds its data.
	err := writeFileStream(filepath.Join(dir, sessionsDataFile), func(w io.Writer) error {
		for _, s := range sb.Sessions() {
			chunks, next, first, end, err := s.Journal.exportTo(w)
			if err != nil {
				return fmt.Errorf("session %s: %w", s.ID, err)
			}
			es := exportedSession{SessionInfo: nodeapi.SessionInfo{
				PID: s.PID, Spec: s.Spec, StartedAt: s.StartedAt, End: end, OutputBytes: next, DroppedBytes: first,
			}, Chunks: chunks}
			if end != nil {
				es.EndedAt = s.EndedAt()
			}
			exp.Sessions = append(exp.Sessions, es)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write the sessions of %s: %w", sb.ID, unwrapPathErr(err))
	}
	data, err := json.Marshal(exp)
	if err != nil {
		return fmt.Errorf("write the sessions of %s: %w", sb.ID, err)
	}
	if err := writeFileSync(filepath.Join(dir, sessionsFile), data); err != nil {
		return fmt.Errorf("write the sessions of %s: %w", sb.ID, unwrapPathErr(err))
	}
	return nil
}

// importSessions gives sb the sessions an image in dir carries, if any,
// and follows those whose process still ran from the end of their
// journals. It is for a sandbox the node had no handle of: its sessions
// came with its image from another node.
func (sb *Sandbox) importSessions(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, sessionsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the sessions of %s: %w", sb.ID, unwrapPathErr(err))
	}
	var exp exportedSessions
	if err := json.Unmarshal(data, &exp); err != nil {
		return fmt.Errorf("read the sessions of %s: %w", sb.ID, err)
	}
	if len(exp.Sessions) > maxExportedSessions {
		return fmt.Errorf("read the sessions of %s: %d sessions, at most %d", sb.ID, len(exp.Sessions), maxExportedSessions)
	}
	f, err := os.Open(filepath.Join(dir, sessionsDataFile))
	if err != nil {
		return fmt.Errorf("read the sessions of %s: %w", sb.ID, unwrapPathErr(err))
	}
	defer f.Close()
	r := bufio.NewReader(f)
	type imported struct {
		s   *Session
		ctx context.Context
	}
	var sessions []imported
	for _, es := range exp.Sessions {
		j, err := readJournal(r, es, sb.node.journalConfig(sb.ID, sessionID(es.PID)))
		if err != nil {
			for _, im := range sessions {
				im.s.cancel()
				im.s.Journal.Close()
			}
			return fmt.Errorf("read the sessions of %s: session %s: %w", sb.ID, sessionID(es.PID), err)
		}
		streamCtx, cancel := context.WithCancel(context.Background())
		s := &Session{
			ID: sessionID(es.PID), PID: es.PID, Spec: es.Spec, StartedAt: es.StartedAt, Journal: j,
			endedAt: es.EndedAt, cancel: cancel, onOutput: func() { sb.node.activity(sb.ID) },
		}
		if es.End != nil && s.endedAt.IsZero() {
			s.endedAt = time.Now().UTC()
		}
		sessions = append(sessions, imported{s, streamCtx})
	}
	sb.mu.Lock()
	for _, im := range sessions {
		if old, ok := sb.sessions[im.s.ID]; ok {
			old.cancel()
			old.Journal.Close()
		}
		sb.sessions[im.s.ID] = im.s
	}
	sb.mu.Unlock()
	for _, im := range sessions {
		if _, _, end := im.s.Journal.Status(); end != nil {
			im.s.cancel() // ended before the move: nothing to follow
			continue
		}
		go sb.follow(im.ctx, im.s, nil)
	}
	return nil
}

// readJournal reads one session's chunks from r into a journal of cfg,
// checking that they lie in order between the journal's offsets. A journal
// that holds less than the sender's keeps the newest output, like any
// other (no reader waits for the oldest yet); a chunk at a time is in
// memory beyond its bounds.
func readJournal(r io.Reader, es exportedSession, cfg JournalConfig) (_ *Journal, err error) {
	first, next := es.DroppedBytes, es.OutputBytes
	if first < 0 || next < first {
		return nil, fmt.Errorf("offsets %d..%d are out of order", first, next)
	}
	j := newJournal(cfg)
	defer func() {
		if err != nil {
			j.Close()
		}
	}()
	j.Skip(first)
	at := first
	for _, c := range es.Chunks {
		if c.Size <= 0 || c.Offset < at || c.Offset+int64(c.Size) > next || c.Stream < Stdout || c.Stream > PTY {
			return nil, fmt.Errorf("chunk at %d of %d bytes does not fit the journal", c.Offset, c.Size)
		}
		data := make([]byte, c.Size)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fmt.Errorf("chunk at %d: %w", c.Offset, err)
		}
		j.restoreChunk(Chunk{Stream: c.Stream, Offset: c.Offset, Data: data})
		at = c.Offset + int64(c.Size)
	}
	j.Skip(next)
	if es.End != nil {
		j.Finish(*es.End)
	}
	return j, nil
}

// writeFileStream writes path from fill through a temporary file renamed
// into place once synced, as writeFileSync does for bytes in memory.
func writeFileStream(path string, fill func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	w := bufio.NewWriter(f)
	if err := fill(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// unwrapPathErr drops the path of a file system error: the node's paths
// stay out of errors its callers may show.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %w", le.Op, le.Err)
	}
	return err
}
