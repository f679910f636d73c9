package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
)

// dirWatch watches a directory (optionally its whole tree) and turns
// fsnotify events into FilesystemEvents with names relative to the root,
// as envd does.
type dirWatch struct {
	agent        *Agent
	root         string
	recursive    bool
	includeEntry bool
	fsw          *fsnotify.Watcher
	events       chan *filesystempb.FilesystemEvent
	done         chan struct{}
	closeOnce    sync.Once
}

// watchRequest is what WatchDirRequest and CreateWatcherRequest share.
type watchRequest interface {
	GetRecursive() bool
	GetIncludeEntry() bool
	GetAllowNetworkMounts() bool
}

func (a *Agent) newDirWatch(root string, req watchRequest) (*dirWatch, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError("watch", err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("watch: %s is not a directory", root))
	}
	if !req.GetAllowNetworkMounts() {
		network, err := onNetworkFilesystem(root)
		if err != nil {
			return nil, fsError("watch", err)
		}
		if network != "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"cannot watch path on network filesystem: %s is on %s, whose changes made elsewhere are not reported; "+
					"ask with allowNetworkMounts to watch it anyway", root, network))
		}
	}
	recursive, includeEntry := req.GetRecursive(), req.GetIncludeEntry()
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create watcher: %w", err))
	}
	w := &dirWatch{
		agent: a, root: root, recursive: recursive, includeEntry: includeEntry, fsw: fsw,
		events: make(chan *filesystempb.FilesystemEvent, 256),
		done:   make(chan struct{}),
	}
	if err := w.add(root); err != nil {
		_ = fsw.Close()
		return nil, fsError("watch", err)
	}
	go w.run()
	return w, nil
}

// add watches dir, and with recursion every directory below it. fsnotify
// (inotify) is not recursive by itself.
func (w *dirWatch) add(dir string) error {
	if !w.recursive {
		return w.fsw.Add(dir)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // vanished or unreadable subtree: skip it
		}
		if d.IsDir() {
			if err := w.fsw.Add(path); err != nil && path == dir {
				return err
			}
		}
		return nil
	})
}

func (w *dirWatch) run() {
	defer close(w.events)
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if w.recursive && ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					_ = w.add(ev.Name)
				}
			}
			for _, out := range w.convert(ev) {
				select {
				case w.events <- out:
				case <-w.done:
					return
				}
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.agent.log.Warn("watch error", "root", w.root, "err", err)
		}
	}
}

var fsnotifyOps = []struct {
	op  fsnotify.Op
	typ filesystempb.EventType
}{
	{fsnotify.Create, filesystempb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, filesystempb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, filesystempb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, filesystempb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, filesystempb.EventType_EVENT_TYPE_CHMOD},
}

func (w *dirWatch) convert(ev fsnotify.Event) []*filesystempb.FilesystemEvent {
	name, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	var out []*filesystempb.FilesystemEvent
	for _, m := range fsnotifyOps {
		if !ev.Has(m.op) {
			continue
		}
		fe := &filesystempb.FilesystemEvent{Name: name, Type: m.typ}
		if w.includeEntry {
			if info, err := w.agent.entryInfo(ev.Name); err == nil {
				fe.Entry = info
			}
		}
		out = append(out, fe)
	}
	return out
}

func (w *dirWatch) close() {
	w.closeOnce.Do(func() {
		close(w.done)
		_ = w.fsw.Close()
	})
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	_, root, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := s.agent.newDirWatch(root, req.Msg)
	if err != nil {
		return err
	}
	defer w.close()
	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{
		Start: &filesystempb.WatchDirResponse_StartEvent{},
	}}); err != nil {
		return err
	}
	keepalive := keepaliveInterval(req.Header())
	idle := time.NewTimer(keepalive)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return streamContextError(ctx)
		case ev, ok := <-w.events:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher stopped"))
			}
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			idle.Reset(keepalive)
		case <-idle.C:
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{
				Keepalive: &filesystempb.WatchDirResponse_KeepAlive{},
			}}); err != nil {
				return err
			}
			idle.Reset(keepalive)
		}
	}
}

// maxPolledEvents bounds a polled watcher that nobody polls; the oldest
// events are dropped first.
const maxPolledEvents = 10000

// polledWatcher buffers a dirWatch's events for GetWatcherEvents.
type polledWatcher struct {
	watch *dirWatch

	mu      sync.Mutex
	pending []*filesystempb.FilesystemEvent
}

func (p *polledWatcher) collect() {
	for ev := range p.watch.events {
		p.mu.Lock()
		if len(p.pending) >= maxPolledEvents {
			p.pending = p.pending[1:]
		}
		p.pending = append(p.pending, ev)
		p.mu.Unlock()
	}
}

func (p *polledWatcher) drain() []*filesystempb.FilesystemEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = nil
	return out
}

type watcherRegistry struct {
	mu       sync.Mutex
	watchers map[string]*polledWatcher
}

func newWatcherRegistry() *watcherRegistry {
	return &watcherRegistry{watchers: map[string]*polledWatcher{}}
}

func (r *watcherRegistry) add(w *polledWatcher) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchers[id] = w
	return id
}

func (r *watcherRegistry) get(id string) (*polledWatcher, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.watchers[id]
	return w, ok
}

func (r *watcherRegistry) remove(id string) (*polledWatcher, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.watchers[id]
	delete(r.watchers, id)
	return w, ok
}

func (r *watcherRegistry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, w := range r.watchers {
		w.watch.close()
		delete(r.watchers, id)
	}
}

func (s *filesystemService) CreateWatcher(_ context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	_, root, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	w, err := s.agent.newDirWatch(root, req.Msg)
	if err != nil {
		return nil, err
	}
	pw := &polledWatcher{watch: w}
	go pw.collect()
	id := s.agent.watchers.add(pw)
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *filesystemService) GetWatcherEvents(_ context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	pw, ok := s.agent.watchers.get(req.Msg.GetWatcherId())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.GetWatcherId()))
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: pw.drain()}), nil
}

func (s *filesystemService) RemoveWatcher(_ context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	pw, ok := s.agent.watchers.remove(req.Msg.GetWatcherId())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.GetWatcherId()))
	}
	pw.watch.close()
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}

// Filesystem magic numbers (statfs f_type, linux/magic.h) of the network
// and user-space filesystems envd refuses to watch unless asked: inotify
// reports only the changes made through this kernel, so a watch there
// silently misses what other machines (or the FUSE daemon) change.
var networkFilesystems = map[int64]string{
	0x6969:     "NFS",
	0xff534d42: "CIFS",
	0x517b:     "SMB",
	0xfe534d42: "SMB2",
	0x65735546: "FUSE",
}

// onNetworkFilesystem names the network filesystem dir is on, or "".
func onNetworkFilesystem(dir string) (string, error) {
	magic, err := filesystemMagic(dir)
	if err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	return networkFilesystems[magic], nil
}

// filesystemMagic is statfs's f_type; a variable so that tests can stand
// in for an NFS or FUSE mount, which they cannot make.
var filesystemMagic = func(dir string) (int64, error) {
	var st syscall.Statfs_t
	err := syscall.Statfs(dir, &st)
	return int64(st.Type), err
}
