package template

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// store persists the catalog under <DataDir>/templates:
//
//	names.json   name -> latest template ID
//	<id>.json    one record per template version
//	<id>.log     that version's build log, one line per line
//
// Every JSON write is temp file + fsync + rename, so a crash leaves either
// the old or the new version, never a torn one.
type store struct {
	dir string
}

const namesFile = "names.json"

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("template catalog: %w", err)
	}
	return &store{dir: dir}, nil
}

func (s *store) recordPath(id string) string { return filepath.Join(s.dir, id+".json") }
func (s *store) logPath(id string) string    { return filepath.Join(s.dir, id+".log") }

func (s *store) load() (map[string]*Template, map[string]string, error) {
	records := map[string]*Template{}
	names := map[string]string{}
	if data, err := os.ReadFile(filepath.Join(s.dir, namesFile)); err == nil {
		if err := json.Unmarshal(data, &names); err != nil {
			return nil, nil, fmt.Errorf("template catalog %s: %w", namesFile, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !idPattern.MatchString(id) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		var t Template
		if err := json.Unmarshal(data, &t); err != nil {
			return nil, nil, fmt.Errorf("template catalog %s: %w", e.Name(), err)
		}
		records[id] = &t
	}
	for name, id := range names {
		if _, ok := records[id]; !ok {
			delete(names, name) // record lost: the name is meaningless
		}
	}
	return records, names, nil
}

func (s *store) saveRecord(t *Template) error {
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.recordPath(t.ID), data)
}

func (s *store) saveNames(names map[string]string) error {
	data, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.dir, namesFile), data)
}

func (s *store) removeRecord(id string) error {
	for _, p := range []string{s.recordPath(id), s.logPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (s *store) createLog(id string) (*os.File, error) {
	return os.OpenFile(s.logPath(id), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
}

// writeFileAtomic replaces path with data durably.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func readLogLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

func appendLogLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(f, line)
	f.Close()
}

// buildLog collects a running build's log lines in memory (for Logs and
// followers) and appends them to the log file (for after the build).
type buildLog struct {
	mu      sync.Mutex
	lines   []string
	done    bool
	changed chan struct{} // closed and replaced on every change
	file    *os.File
}

func newBuildLog(f *os.File) *buildLog {
	return &buildLog{file: f, changed: make(chan struct{})}
}

func (l *buildLog) add(line string) {
	line = strings.ToValidUTF8(strings.ReplaceAll(line, "\n", " "), "?")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.lines = append(l.lines, line)
	if l.file != nil {
		fmt.Fprintln(l.file, line)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *buildLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	if l.file != nil {
		l.file.Sync()
		l.file.Close()
	}
	close(l.changed)
}

func (l *buildLog) since(from int) ([]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from < 0 {
		from = 0
	}
	if from >= len(l.lines) {
		return nil, l.done
	}
	return append([]string(nil), l.lines[from:]...), l.done
}

// follow passes every line from index from on to fn until the build ends
// or ctx is done.
func (l *buildLog) follow(ctx context.Context, from int, fn func(string)) error {
	for {
		l.mu.Lock()
		lines := append([]string(nil), l.lines[min(from, len(l.lines)):]...)
		done, changed := l.done, l.changed
		l.mu.Unlock()
		for _, line := range lines {
			fn(line)
		}
		from += len(lines)
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
