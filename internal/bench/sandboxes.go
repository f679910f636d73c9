package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// benchMetadataKey tags every sandbox a run creates with the run's id.
const benchMetadataKey = "space-bench"

// Lifetimes of the sandboxes a run creates. They are a safety net: a run
// deletes what it creates, but one killed with SIGKILL leaves sandboxes
// that then expire on their own.
const (
	shortLifetimeS = 600
	longLifetimeS  = 3600
)

// waitTimeout bounds how long a sandbox may take to reach a state.
const waitTimeout = 2 * time.Minute

// cleanupTimeout bounds the final cleanup, which runs even after ctx ended.
const cleanupTimeout = 5 * time.Minute

// skipLogs is a logs_from beyond any build log: template reads here (the
// pool is polled every few milliseconds) need the record, not its log.
const skipLogs = 1 << 30

// tracker remembers what a run created and has not deleted yet.
type tracker struct {
	mu        sync.Mutex
	sandboxes map[string]bool
	snapshots map[snapshotRef]bool
}

type snapshotRef struct{ sandbox, name string }

func newTracker() *tracker {
	return &tracker{sandboxes: map[string]bool{}, snapshots: map[snapshotRef]bool{}}
}

func (t *tracker) setSandbox(id string, live bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if live {
		t.sandboxes[id] = true
	} else {
		delete(t.sandboxes, id)
	}
}

func (t *tracker) setSnapshot(ref snapshotRef, live bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if live {
		t.snapshots[ref] = true
	} else {
		delete(t.snapshots, ref)
	}
}

func (t *tracker) pending() ([]string, []snapshotRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.sandboxes))
	for id := range t.sandboxes {
		ids = append(ids, id)
	}
	refs := make([]snapshotRef, 0, len(t.snapshots))
	for ref := range t.snapshots {
		refs = append(refs, ref)
	}
	return ids, refs
}

// request is a create request for the run's template. memoryMB 0 leaves
// the limit to the server, which keeps the request eligible for a warm
// pool that holds sandboxes of the template's default size.
func (r *runner) request(memoryMB, lifetimeS int) apiv1.CreateSandboxRequest {
	req := apiv1.CreateSandboxRequest{
		Template: r.cfg.Template,
		MemoryMB: memoryMB,
		TimeoutS: lifetimeS,
		Metadata: map[string]string{benchMetadataKey: r.runID},
	}
	if r.cfg.Runtime != runtimeGVisor {
		req.Runtime = r.cfg.Runtime
	}
	return req
}

// create posts req and tracks the sandbox for cleanup.
func (r *runner) create(ctx context.Context, req apiv1.CreateSandboxRequest) (*apiv1.Sandbox, error) {
	sb, err := r.api.CreateSandbox(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	r.tracked.setSandbox(sb.ID, true)
	return sb, nil
}

// createRunning creates a sandbox and waits until it runs. The duration is
// from just before the POST until the sandbox was seen running.
func (r *runner) createRunning(ctx context.Context, req apiv1.CreateSandboxRequest) (*apiv1.Sandbox, time.Duration, error) {
	start := time.Now()
	sb, err := r.create(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	if sb, err = r.settle(ctx, sb, apiv1.StateRunning); err != nil {
		return nil, 0, err
	}
	d := time.Since(start)
	if r.isolation == "" {
		r.isolation = sb.Isolation
	}
	return sb, d, nil
}

// settle waits until sb is in state want, unless it already is: lifecycle
// calls answer with the final state today, but may answer early later.
func (r *runner) settle(ctx context.Context, sb *apiv1.Sandbox, want string) (*apiv1.Sandbox, error) {
	if sb.State == want {
		return sb, nil
	}
	got, err := r.api.WaitSandbox(ctx, sb.ID, want, waitTimeout)
	if err != nil {
		return nil, fmt.Errorf("wait for sandbox %s to be %s: %w", sb.ID, want, err)
	}
	return got, nil
}

// remove deletes a sandbox the run created; one already gone is fine.
func (r *runner) remove(ctx context.Context, id string) error {
	if err := r.api.DeleteSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	r.tracked.setSandbox(id, false)
	return nil
}

// cleanup deletes every snapshot and sandbox the run still owns, including
// any found only by the run's metadata tag. It runs after ctx may have been
// cancelled (Ctrl-C), so it has its own deadline.
func (r *runner) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	ids, snaps := r.tracked.pending()
	for _, ref := range snaps {
		if err := r.api.DeleteSnapshot(ctx, ref.sandbox, ref.name); err != nil && !client.IsNotFound(err) {
			r.progress.printf("cleanup: delete snapshot %s/%s: %v", ref.sandbox, ref.name, err)
		}
		r.tracked.setSnapshot(ref, false)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	tagged, err := r.api.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{benchMetadataKey: r.runID}})
	if err != nil {
		r.progress.printf("cleanup: list sandboxes of this run: %v", err)
	}
	for _, sb := range tagged {
		if !seen[sb.ID] && sb.State != apiv1.StateStopped && sb.State != apiv1.StateFailed {
			ids = append(ids, sb.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	r.progress.printf("cleanup: deleting %d sandboxes", len(ids))
	r.removeAll(ctx, "cleanup", ids)
}

// removeAll deletes sandboxes a few at a time, reporting progress under key.
func (r *runner) removeAll(ctx context.Context, key string, ids []string) {
	const parallel = 8
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
	)
	work := make(chan string)
	for range min(parallel, len(ids)) {
		wg.Go(func() {
			for id := range work {
				if err := r.remove(ctx, id); err != nil {
					r.progress.printf("%s: %v", key, err)
				}
				mu.Lock()
				done++
				r.progress.step(key, done, len(ids), "deleted")
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

// isRefusal reports whether err is the node declining a sandbox for lack of
// room (422) or being unavailable (503), rather than something broken.
func isRefusal(err error) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.StatusCode == http.StatusUnprocessableEntity || apiErr.StatusCode == http.StatusServiceUnavailable)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
