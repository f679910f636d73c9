package bench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressInterval spaces the intermediate lines of long measurements.
const progressInterval = 3 * time.Second

// progress writes "bench: ..." lines. Measurements print when they start
// and end; in between at most one line per progressInterval, so a run of
// several minutes shows it is alive without flooding the terminal.
type progress struct {
	mu   sync.Mutex
	w    io.Writer
	last map[string]time.Time
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, last: map[string]time.Time{}}
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "bench: "+format+"\n", args...)
}

// step reports done of total for key: always at the start and the end,
// otherwise only when the last line for key is old enough.
func (p *progress) step(key string, done, total int, extra string) {
	p.mu.Lock()
	now := time.Now()
	due := done == 0 || done == total || now.Sub(p.last[key]) >= progressInterval
	if due {
		p.last[key] = now
	}
	p.mu.Unlock()
	if !due {
		return
	}
	if extra != "" {
		extra = " " + extra
	}
	p.printf("%s %d/%d%s", key, done, total, extra)
}

// due reports whether a periodic line for key should be printed now.
func (p *progress) due(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last[key]) < progressInterval {
		return false
	}
	p.last[key] = time.Now()
	return true
}
