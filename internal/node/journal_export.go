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

// export returns what the journal holds: its chunks (which are never
// changed once appended), its offsets and its end.
func (j *Journal) export() (chunks []Chunk, next, first int64, end *End) {
	j.mu.Lock()
	defer j.mu.Unlock()
	chunks = append([]Chunk(nil), j.chunks...)
	if j.end != nil {
		e := *j.end
		end = &e
	}
	return chunks, j.next, j.first, end
}

// restoredJournal is a journal holding chunks, bounded to limit like any
// other (the oldest chunks go first).
func restoredJournal(limit int64, chunks []Chunk, next, first int64, end *End) *Journal {
	j := NewJournal(limit)
	j.chunks, j.next, j.first, j.end = chunks, next, first, end
	for _, c := range chunks {
		j.held += int64(len(c.Data))
	}
	for j.held > j.limit && len(j.chunks) > 1 {
		j.held -= int64(len(j.chunks[0].Data))
		j.chunks = j.chunks[1:]
	}
	if len(j.chunks) > 0 {
		j.first = j.chunks[0].Offset
	}
	return j
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
			chunks, next, first, end := s.Journal.export()
			es := exportedSession{SessionInfo: nodeapi.SessionInfo{
				PID: s.PID, Spec: s.Spec, StartedAt: s.StartedAt, End: end, OutputBytes: next, DroppedBytes: first,
			}}
			if end != nil {
				es.EndedAt = s.EndedAt()
			}
			for _, c := range chunks {
				if _, err := w.Write(c.Data); err != nil {
					return err
				}
				es.Chunks = append(es.Chunks, exportedChunk{Stream: c.Stream, Offset: c.Offset, Size: len(c.Data)})
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
	limit := sb.node.cfg.SessionOutputLimit
	type imported struct {
		s   *Session
		ctx context.Context
	}
	var sessions []imported
	for _, es := range exp.Sessions {
		j, err := readJournal(r, es, limit)
		if err != nil {
			for _, im := range sessions {
				im.s.cancel()
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

// readJournal reads one session's chunks from r, checking that they lie
// in order between the journal's offsets.
func readJournal(r io.Reader, es exportedSession, limit int64) (*Journal, error) {
	first, next := es.DroppedBytes, es.OutputBytes
	if first < 0 || next < first {
		return nil, fmt.Errorf("offsets %d..%d are out of order", first, next)
	}
	chunks := make([]Chunk, 0, len(es.Chunks))
	at := first
	for _, c := range es.Chunks {
		if c.Size <= 0 || c.Offset < at || c.Offset+int64(c.Size) > next || c.Stream < Stdout || c.Stream > PTY {
			return nil, fmt.Errorf("chunk at %d of %d bytes does not fit the journal", c.Offset, c.Size)
		}
		data := make([]byte, c.Size)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fmt.Errorf("chunk at %d: %w", c.Offset, err)
		}
		chunks = append(chunks, Chunk{Stream: c.Stream, Offset: c.Offset, Data: data})
		at = c.Offset + int64(c.Size)
	}
	return restoredJournal(limit, chunks, next, first, es.End), nil
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
