package template

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/storage"
)

// A build cache (Config.BuildCache) keeps the root volume of every
// finished build outside the data directory, as a btrfs send stream named
// by the template's ID. The ID covers everything the volume is made of
// (the recipe, its base, the files it copies, the builder's version, the
// CA it trusts: id.go), so a build whose ID is in the cache is received
// from it instead of being built again: by another server on the same
// host, or by the same one after its data directory was wiped (the test
// suite keeps one under .tools, so that a run rebuilds only what
// changed). What each backend derives from the volume (a microVM's disk
// image) is made again on every build, cached or not: it depends on the
// backend's code, which the ID does not cover.
//
// An entry is written under a temporary name and renamed into place when
// whole; one that fails to receive is removed and the template built.
// Entries unused for buildCacheMaxAge, and the least recently used past
// Config.BuildCacheMaxBytes, are removed when a manager opens the cache:
// every build of a new ID adds an entry (a test suite's runs add a few
// GiB each), so an unbounded cache would fill its disk.
const buildCacheMaxAge = 14 * 24 * time.Hour

// DefaultBuildCacheMaxBytes is the cache's bound unless the manager's
// Config names another.
const DefaultBuildCacheMaxBytes = 32 << 30

// cacheSuffix ends the cache's entry files; partialMarker is in the name
// of one being written; lockSuffix ends the file a build of an entry
// holds locked (lockCacheEntry).
const (
	cacheSuffix   = ".btrfs"
	partialMarker = ".partial-"
	lockSuffix    = ".lock"
)

// cacheLockPoll is how often a build waiting for another build of its ID
// tries the lock again.
const cacheLockPoll = 200 * time.Millisecond

func (m *Manager) cacheEntry(id string) string {
	return filepath.Join(m.cfg.BuildCache, id+cacheSuffix)
}

// openBuildCache creates the cache directory and removes what a crash
// left of a write and the entries no one used lately.
func (m *Manager) openBuildCache() error {
	if m.cfg.BuildCache == "" {
		return nil
	}
	if err := os.MkdirAll(m.cfg.BuildCache, 0o700); err != nil {
		return fmt.Errorf("template build cache: %w", err)
	}
	entries, err := os.ReadDir(m.cfg.BuildCache)
	if err != nil {
		return fmt.Errorf("template build cache: %w", err)
	}
	var kept []fs.FileInfo // whole entries, to bound
	var total int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		stale := strings.Contains(e.Name(), partialMarker) && time.Since(info.ModTime()) > time.Hour ||
			(strings.HasSuffix(e.Name(), cacheSuffix) || strings.HasSuffix(e.Name(), lockSuffix)) && time.Since(info.ModTime()) > buildCacheMaxAge
		if stale {
			_ = os.Remove(filepath.Join(m.cfg.BuildCache, e.Name()))
		} else if strings.HasSuffix(e.Name(), cacheSuffix) {
			kept = append(kept, info)
			total += info.Size()
		}
	}
	// Least recently used first (a receive touches its entry). A server
	// receiving an entry removed here keeps reading its open file; the
	// entries' lock files stay (removing a held one would let a second
	// build of its ID start), and go with age.
	limit := m.cfg.BuildCacheMaxBytes
	if limit <= 0 {
		limit = DefaultBuildCacheMaxBytes
	}
	slices.SortFunc(kept, func(a, b fs.FileInfo) int { return a.ModTime().Compare(b.ModTime()) })
	for _, info := range kept {
		if total <= limit {
			break
		}
		if err := os.Remove(filepath.Join(m.cfg.BuildCache, info.Name())); err == nil {
			total -= info.Size()
		}
	}
	return nil
}

// lockCacheEntry takes the host-wide lock of id's cache entry (an flock,
// which the kernel drops with the process that held it), waiting while
// another build of id holds it, and returns its release. Without a cache
// there is nothing to share and nothing is locked. A lock that cannot be
// taken costs what the cache's other failures cost, at most a second
// build of id: it is logged and the build goes on unlocked. Only the
// context's end is an error.
func (m *Manager) lockCacheEntry(ctx context.Context, id string, logLine func(string)) (unlock func(), err error) {
	unlocked := func(err error) (func(), error) {
		m.cfg.Logf("template build cache: lock %s: %v", id, err)
		logLine("build cache: not locked, building without it: " + hostpath.Pathless(err).Error())
		return func() {}, nil
	}
	if m.cfg.BuildCache == "" {
		return func() {}, nil
	}
	path := m.cacheEntry(id) + lockSuffix
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return unlocked(err)
	}
	waited := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return unlocked(err)
		}
		if !waited {
			waited = true
			logLine("build cache: another build of " + id + " runs on this host; waiting for it")
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(cacheLockPoll):
		}
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)   // in use: not stale
	return func() { f.Close() }, nil // closing the file drops the lock
}

// receiveCached makes the read-only volume final from the cache's entry
// of id, if there is one. A broken entry is removed and reported as a
// miss, so that the template is built instead.
func (m *Manager) receiveCached(ctx context.Context, id, final string, logLine func(string)) bool {
	if m.cfg.BuildCache == "" {
		return false
	}
	path := m.cacheEntry(id)
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.cfg.Logf("template build cache: %v", err)
		}
		return false
	}
	defer f.Close()
	if err := m.cfg.Volumes.Receive(ctx, final, f, storage.ReceiveOptions{}); err != nil {
		m.cfg.Logf("template build cache: entry of %s: %v", id, err)
		logLine("build cache: the entry does not receive, building instead: " + hostpath.Pathless(err).Error())
		_ = m.cfg.Volumes.Delete(final)
		if !errors.Is(err, storage.ErrNoStreams) && ctx.Err() == nil {
			_ = os.Remove(path)
		}
		return false
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // used: kept another buildCacheMaxAge
	return true
}

// saveCached adds the finished, read-only volume final of id to the
// cache. A failure costs only a later rebuild, so it is logged, not
// returned.
func (m *Manager) saveCached(ctx context.Context, id, final string, logLine func(string)) {
	if m.cfg.BuildCache == "" {
		return
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := m.cacheEntry(id) + partialMarker + hex.EncodeToString(suffix[:])
	err := func() error {
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := m.cfg.Volumes.Send(ctx, final, f); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return os.Rename(tmp, m.cacheEntry(id))
	}()
	if err != nil {
		_ = os.Remove(tmp)
		if !errors.Is(err, storage.ErrNoStreams) {
			m.cfg.Logf("template build cache: save %s: %v", id, err)
			logLine("build cache: not saved: " + hostpath.Pathless(err).Error())
		}
	}
}
