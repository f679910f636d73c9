package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// fillPath is in the sandbox's /dev/shm, a tmpfs held in the sandbox's
// memory, so the data is part of every memory image the lifecycle
// operations write and restore. It is random so that image compression
// cannot shrink it.
const fillPath = "/dev/shm/space-bench-fill"

// measureLifecycle takes pause_resume, suspend, resume_suspended, snapshot
// and branch on one sandbox of cfg.MemoryMB that holds cfg.FillMiB of data.
func (r *runner) measureLifecycle(ctx context.Context) error {
	sb, err := r.filledSandbox(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = r.remove(context.WithoutCancel(ctx), sb.ID) }()

	var errs []error
	measure := func(keys []string, fn func() error) {
		for _, k := range keys {
			if r.cfg.Skip[k] {
				r.res.note(k, "skipped")
			}
		}
		if r.skipped(keys) {
			return
		}
		if err := fn(); err != nil {
			if ctx.Err() != nil {
				errs = append(errs, err)
				return
			}
			r.record(keys, err)
		}
	}
	measure([]string{KeyPauseResume}, func() error { return r.measurePauseResume(ctx, sb.ID) })
	measure([]string{KeySuspend, KeyResumeSuspended}, func() error { return r.measureSuspendResume(ctx, sb.ID) })
	measure([]string{KeySnapshot}, func() error { return r.measureSnapshot(ctx, sb.ID) })
	measure([]string{KeyBranch}, func() error { return r.measureBranch(ctx, sb.ID) })
	return errors.Join(errs...)
}

// filledSandbox starts the lifecycle sandbox and fills its memory.
func (r *runner) filledSandbox(ctx context.Context) (*apiv1.Sandbox, error) {
	sb, _, err := r.createRunning(ctx, r.request(r.cfg.MemoryMB, longLifetimeS))
	if err != nil {
		return nil, err
	}
	info := &LifecycleSandbox{MemoryMB: r.cfg.MemoryMB, FillMiB: r.cfg.FillMiB}
	r.res.Lifecycle = info
	if r.cfg.FillMiB > 0 {
		script := fmt.Sprintf("dd if=/dev/urandom of=%s bs=1048576 count=%d 2>&1", fillPath, r.cfg.FillMiB)
		res, err := r.api.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"sh", "-c", script}, TimeoutS: 60})
		if err != nil {
			return nil, fmt.Errorf("fill %d MiB of memory in %s: %w", r.cfg.FillMiB, sb.ID, err)
		}
		if res.ExitCode != 0 {
			return nil, fmt.Errorf("fill %d MiB of memory in %s: exit %d: %s", r.cfg.FillMiB, sb.ID, res.ExitCode, res.Stdout)
		}
	}
	if used, err := sandboxCgroupMemory(sb.ID); err == nil {
		info.UsedMiB = mib(used)
	}
	r.progress.printf("lifecycle sandbox %s: memory_mb %d, %d MiB written to %s, %.0f MiB accounted",
		sb.ID, info.MemoryMB, info.FillMiB, fillPath, info.UsedMiB)
	return sb, nil
}

// measurePauseResume times POST pause followed by POST resume.
func (r *runner) measurePauseResume(ctx context.Context, id string) error {
	s, err := r.sample(ctx, KeyPauseResume, func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			if err := r.transition(ctx, id, "pause", apiv1.StatePaused); err != nil {
				return err
			}
			return r.transition(ctx, id, "resume", apiv1.StateRunning)
		})
	})
	r.res.PauseResume = s
	return err
}

// measureSuspendResume times POST suspend and, separately, the POST resume
// that brings the suspended sandbox back; one sample of each per round.
func (r *runner) measureSuspendResume(ctx context.Context, id string) error {
	n := r.cfg.Samples
	var suspends, resumes []time.Duration
	r.progress.step("suspend+resume", 0, n, "")
	for i := range n {
		d, err := timed(func() error { return r.transition(ctx, id, "suspend", apiv1.StateSuspended) })
		if err != nil {
			return fmt.Errorf("sample %d of %d: %w", i+1, n, err)
		}
		suspends = append(suspends, d)
		d, err = timed(func() error { return r.transition(ctx, id, "resume", apiv1.StateRunning) })
		if err != nil {
			return fmt.Errorf("sample %d of %d: %w", i+1, n, err)
		}
		resumes = append(resumes, d)
		extra := ""
		if i+1 == n {
			extra = fmt.Sprintf("p50 %.1f ms + %.1f ms", Summarize(suspends).P50MS, Summarize(resumes).P50MS)
		}
		r.progress.step("suspend+resume", i+1, n, extra)
	}
	if !r.cfg.Skip[KeySuspend] {
		r.res.Suspend = Summarize(suspends)
	}
	if !r.cfg.Skip[KeyResumeSuspended] {
		r.res.ResumeSuspended = Summarize(resumes)
	}
	return nil
}

// measureSnapshot times POST snapshots; each snapshot is deleted again
// (untimed), since snapshots outlive their sandbox.
func (r *runner) measureSnapshot(ctx context.Context, id string) error {
	s, err := r.sample(ctx, KeySnapshot, func(ctx context.Context, i int) (time.Duration, error) {
		ref := snapshotRef{sandbox: id, name: fmt.Sprintf("space-bench-%s-%d", r.runID, i)}
		start := time.Now()
		r.tracked.setSnapshot(ref, true)
		if _, err := r.api.CreateSnapshot(ctx, id, ref.name); err != nil {
			return 0, fmt.Errorf("snapshot %s: %w", id, err)
		}
		d := time.Since(start)
		if err := r.api.DeleteSnapshot(ctx, id, ref.name); err != nil {
			return 0, fmt.Errorf("delete snapshot %s/%s: %w", id, ref.name, err)
		}
		r.tracked.setSnapshot(ref, false)
		return d, nil
	})
	r.res.Snapshot = s
	return err
}

// measureBranch times POST branch (count 1) until the branch runs; the
// branch is deleted again (untimed).
func (r *runner) measureBranch(ctx context.Context, id string) error {
	s, err := r.sample(ctx, KeyBranch, func(ctx context.Context, _ int) (time.Duration, error) {
		start := time.Now()
		branches, err := r.api.Branch(ctx, id, 1)
		if err != nil {
			return 0, fmt.Errorf("branch %s: %w", id, err)
		}
		if len(branches) != 1 {
			return 0, fmt.Errorf("branch %s: got %d sandboxes, want 1", id, len(branches))
		}
		r.tracked.setSandbox(branches[0].ID, true)
		if _, err := r.settle(ctx, &branches[0], apiv1.StateRunning); err != nil {
			return 0, err
		}
		d := time.Since(start)
		return d, r.remove(ctx, branches[0].ID)
	})
	r.res.Branch = s
	return err
}

// transition makes one lifecycle call and waits for the state it leads to.
func (r *runner) transition(ctx context.Context, id, action, want string) error {
	var (
		sb  *apiv1.Sandbox
		err error
	)
	switch action {
	case "pause":
		sb, err = r.api.Pause(ctx, id)
	case "resume":
		sb, err = r.api.Resume(ctx, id)
	case "suspend":
		sb, err = r.api.Suspend(ctx, id)
	default:
		return fmt.Errorf("unknown lifecycle action %q", action)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, id, err)
	}
	_, err = r.settle(ctx, sb, want)
	return err
}
