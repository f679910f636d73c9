package store

import (
	"context"
	"time"
)

// Follow keeps a cache of bucket in step with what other processes write
// to a shared store, until ctx ends: reload reads the whole bucket (when
// the watch begins, and on Resync), changed one key that changed. A watch
// that cannot start or ends early is started again a second later, and
// onErr (if not nil) hears why. On a store no one else writes it returns
// at once.
func Follow(ctx context.Context, st Store, bucket string, reload func(), changed func(key string), onErr func(error)) {
	if !st.Shared() {
		return
	}
	for ctx.Err() == nil {
		ch, err := st.Watch(ctx, bucket)
		if err != nil {
			if onErr != nil {
				onErr(err)
			}
		} else {
			reload() // what changed before the watch began
			for key := range ch {
				if key == Resync {
					reload()
				} else {
					changed(key)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
