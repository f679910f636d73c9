package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Session output spills (Journal) to one file per session journal:
// SessionSpillDir/<sandbox>/<session>-<random>.spill, created 0600 in a
// 0700 directory at the journal's first spill (most sessions never print
// past the memory tail and have none). A file is removed when its journal
// is closed: the session replaced or dropped (a rollback), the sandbox
// released. The node holds no durable state, journals included (a
// restarted node follows the processes it adopts from what their agents
// still hold), so every spill file a node finds when it starts is a
// previous process's leftover and goes.

// defaultSessionSpillLimit bounds each session's spill: 32 times the
// memory tail. It is how much a client that went away finds again when it
// comes back (at 1 MB/s of output, four minutes of it), and how far an
// attached client may lag before the process is held: half a minute of
// what an SSE attach delivers (~9 MB/s, docs/performance.md), so that a
// client reading at that speed is rarely the process's brake. A few dozen
// sessions that print that much fit a node's disk. The bound is per
// session, a node's sum is not bounded: a full disk makes journals give up
// their spill (Journal) rather than fail.
const defaultSessionSpillLimit = 256 << 20

// spillSuffix ends every spill file's name: the sweep removes nothing
// else.
const spillSuffix = ".spill"

// fileSpill is a spill file on disk.
type fileSpill struct{ *os.File }

// Close closes and removes the file. It may be gone already: a node
// started again in the same process swept it, while this journal went on
// with the file open.
func (f fileSpill) Close() error {
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// checkSpillDir refuses a spill directory among the volumes: a sandbox
// must never see another's output, nor its own journal's files.
func checkSpillDir(dir string, volumes Volumes) error {
	if dir == "" || volumes == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("node: session spill directory: %w", err)
	}
	root, err := filepath.Abs(volumes.Path(""))
	if err != nil {
		return fmt.Errorf("node: volumes: %w", err)
	}
	if rel, err := filepath.Rel(root, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return errors.New("node: the session spill directory lies among the volumes")
	}
	return nil
}

// spillDir is the directory of a sandbox's spill files, "" without a
// spill.
func (n *Node) spillDir(sandbox string) string {
	if n.cfg.SessionSpillDir == "" || n.cfg.SessionSpillLimit <= 0 {
		return ""
	}
	return filepath.Join(n.cfg.SessionSpillDir, sandbox)
}

// journalConfig is the configuration of a session's journal.
func (n *Node) journalConfig(sandbox, session string) JournalConfig {
	log := n.log
	if log == nil {
		log = n.cfg.Logger
	}
	cfg := JournalConfig{
		Memory: n.cfg.SessionOutputLimit, ReaderTimeout: n.cfg.SessionReaderTimeout,
	}
	if log != nil {
		cfg.Logger = log.With("sandbox", sandbox, "session", session)
	}
	if dir := n.spillDir(sandbox); dir != "" {
		cfg.SpillLimit = n.cfg.SessionSpillLimit
		cfg.OpenSpill = func() (spillFile, error) {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			f, err := os.CreateTemp(dir, session+"-*"+spillSuffix) // 0600
			if err != nil {
				return nil, err
			}
			return fileSpill{f}, nil
		}
	}
	return cfg
}

// newJournal is the journal of a new session of sb.
func (sb *Sandbox) newJournal(session string) *Journal {
	return newJournal(sb.node.journalConfig(sb.ID, session))
}

// removeSpills removes a sandbox's spill files and their directory, once
// its journals are closed.
func (n *Node) removeSpills(sandbox string) {
	if dir := n.spillDir(sandbox); dir != "" {
		n.removeSpillDir(dir)
	}
}

// sweepSpills removes the spill files a previous node process left, and
// the sandbox directories they leave empty.
func (n *Node) sweepSpills() {
	root := n.cfg.SessionSpillDir
	if root == "" {
		return
	}
	sandboxes, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		n.log.Warn("sweep the session output spills", "err", err)
		return
	}
	for _, d := range sandboxes {
		if d.IsDir() && checkID(d.Name()) == nil {
			n.removeSpillDir(filepath.Join(root, d.Name()))
		}
	}
}

// removeSpillDir removes the spill files in dir, then dir if that left it
// empty. Only spill files go: a directory configured by mistake loses
// nothing else.
func (n *Node) removeSpillDir(dir string) {
	files, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		n.log.Warn("remove the session output spills", "err", err)
		return
	}
	for _, f := range files {
		if f.Type().IsRegular() && strings.HasSuffix(f.Name(), spillSuffix) {
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil {
				n.log.Warn("remove the session output spills", "err", err)
			}
		}
	}
	_ = os.Remove(dir) // if empty
}
