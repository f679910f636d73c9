package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Session output spills (Journal) to one file per session journal:
// SessionSpillDir/<sandbox>/<session>-<random>.spill, created 0600 in a
// 0700 directory at the journal's first spill (most sessions never print
// past the memory tail and have none). A file is removed when its journal
// is closed: the session replaced, forgotten or dropped (a rollback), the
// sandbox released. The node holds no durable state, journals included (a
// restarted node follows the processes it adopts from what their agents
// still hold), so every spill file a node finds when it starts is a
// previous process's leftover and goes.
//
// The spill directory is by default spillArea in the volumes' pool: on
// the disk that holds the sandboxes' data (the loop-backed btrfs image
// where the data directory is not btrfs), not on the one that holds the
// node's and control plane's state, and never inside a volume a sandbox
// mounts. What one sandbox's sessions spill together is bounded by
// SessionSpillPerSandbox (spillBudget), so a node's spills are at most
// that times the sandboxes it runs.

// defaultSessionSpillLimit bounds each session's spill: 32 times the
// memory tail. It is how much a client that went away finds again when it
// comes back (at 1 MB/s of output, four minutes of it), and how far an
// attached client may lag before the process is held: half a minute of
// what an SSE attach delivers (~9 MB/s, docs/performance.md), so that a
// client reading at that speed is rarely the process's brake.
const defaultSessionSpillLimit = 256 << 20

// defaultSessionSpillPerSandbox bounds what one sandbox's sessions spill
// together: one session may have the whole of defaultSessionSpillLimit,
// several that print at once share it.
const defaultSessionSpillPerSandbox = 256 << 20

// minSessionSpill is the smallest spill a journal takes from its
// sandbox's budget: less is not worth a file.
const minSessionSpill = 1 << 20

// spillArea is the spill directory's name in the volumes' pool. No
// volume is named so: sandboxes, templates and volumes live under
// "sandboxes/", "templates/", "volumes/" and the like.
const spillArea = ".session-spills"

// spillSuffix ends every spill file's name: the sweep removes nothing
// else.
const spillSuffix = ".spill"

// spillBudget is what one sandbox's session journals may hold on disk
// together: a journal takes its ring's size at its first spill and gives
// it back when its spill file goes.
type spillBudget struct {
	limit int64
	mu    sync.Mutex
	left  int64
}

// take takes up to want bytes, none when less than that and than
// minSessionSpill is left.
func (b *spillBudget) take(want int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := min(want, b.left)
	if got < min(want, minSessionSpill) {
		return 0
	}
	b.left -= got
	return got
}

func (b *spillBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
}

// spillBudget is the budget of sandbox's journals.
func (n *Node) spillBudget(sandbox string) *spillBudget {
	n.spillMu.Lock()
	defer n.spillMu.Unlock()
	if n.spillBudgets == nil {
		n.spillBudgets = map[string]*spillBudget{}
	}
	b, ok := n.spillBudgets[sandbox]
	if !ok {
		limit := n.cfg.SessionSpillPerSandbox
		if limit <= 0 {
			limit = defaultSessionSpillPerSandbox
		}
		b = &spillBudget{limit: limit, left: limit}
		n.spillBudgets[sandbox] = b
	}
	return b
}

// fileSpill is a spill file on disk, holding size bytes of its budget.
type fileSpill struct {
	*os.File
	budget *spillBudget
	size   int64
}

// Close closes and removes the file and gives its size back. It may be
// gone already: a node started again in the same process swept it, while
// this journal went on with the file open.
func (f fileSpill) Close() error {
	f.budget.give(f.size)
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// checkSpillDir refuses a spill directory among the volumes, but for
// spillArea: a sandbox must never see another's output, nor its own
// journal's files.
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
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil // outside the pool
	}
	if rel != spillArea && !strings.HasPrefix(rel, spillArea+string(filepath.Separator)) {
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
		budget := n.spillBudget(sandbox)
		cfg.OpenSpill = func(want int64) (spillFile, int64, error) {
			size := budget.take(want)
			if size == 0 {
				return nil, 0, fmt.Errorf("the sandbox's sessions spill as much as they may together (%d MiB)", budget.limit>>20)
			}
			f, err := createSpill(dir, session)
			if err != nil {
				budget.give(size)
				return nil, 0, err
			}
			return fileSpill{File: f, budget: budget, size: size}, size, nil
		}
	}
	return cfg
}

// createSpill creates a session's spill file in dir.
func createSpill(dir, session string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.CreateTemp(dir, session+"-*"+spillSuffix) // 0600
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
	n.spillMu.Lock()
	delete(n.spillBudgets, sandbox)
	n.spillMu.Unlock()
}

// legacySpillDir is where spills went before they moved off the state's
// disk (issue #31): <state-dir>/sessions. A node swept there too, so an
// upgrade leaves no spill of the release before behind.
const legacySpillDir = "sessions"

// sweepSpills removes the spill files a previous node process left, and
// the sandbox directories they leave empty, where spills go now and
// where they went before.
func (n *Node) sweepSpills() {
	roots := []string{n.cfg.SessionSpillDir}
	if n.cfg.StateDir != "" {
		roots = append(roots, filepath.Join(n.cfg.StateDir, legacySpillDir))
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		sandboxes, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			n.log.Warn("sweep the session output spills", "err", err)
			continue
		}
		for _, d := range sandboxes {
			if d.IsDir() && checkID(d.Name()) == nil {
				n.removeSpillDir(filepath.Join(root, d.Name()))
			}
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
