package store

import (
	"context"
	"sync"
)

// Resync is the key a watch reports when changes may have been missed (the
// notification connection was re-established, or the watcher fell too far
// behind): the watcher reloads the whole bucket.
const Resync = ""

// maxPending bounds the keys queued for one slow watcher; past it they are
// replaced by one Resync.
const maxPending = 4096

// watchers fan changes out to the watches of one store handle.
type watchers struct {
	mu  sync.Mutex
	all map[*watcher]bool
}

// watcher is one Watch: the keys changed since it last delivered,
// coalesced, so that a slow reader never blocks a writer.
type watcher struct {
	bucket string
	wake   chan struct{} // holds a value while something is pending

	mu      sync.Mutex
	pending map[string]bool
	resync  bool
}

// watch registers a watcher of bucket and returns its channel, closed
// when ctx ends.
func (ws *watchers) watch(ctx context.Context, bucket string) <-chan string {
	w := &watcher{bucket: bucket, wake: make(chan struct{}, 1), pending: map[string]bool{}}
	ws.mu.Lock()
	if ws.all == nil {
		ws.all = map[*watcher]bool{}
	}
	ws.all[w] = true
	ws.mu.Unlock()
	out := make(chan string)
	go func() {
		defer close(out)
		defer func() {
			ws.mu.Lock()
			delete(ws.all, w)
			ws.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			w.mu.Lock()
			keys, resync := w.pending, w.resync
			w.pending, w.resync = map[string]bool{}, false
			w.mu.Unlock()
			if resync {
				keys = map[string]bool{Resync: true}
			}
			for k := range keys {
				select {
				case out <- k:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// notify queues key of bucket for its watchers; key Resync (or bucket "")
// asks them to reload everything.
func (ws *watchers) notify(bucket, key string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.all {
		if bucket != "" && w.bucket != bucket {
			continue
		}
		w.mu.Lock()
		if bucket == "" || key == Resync || len(w.pending) >= maxPending {
			w.resync = true
			w.pending = map[string]bool{}
		} else {
			w.pending[key] = true
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
