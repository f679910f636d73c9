package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// Density tuning.
const (
	// densityParallel creates this many sandboxes at once: enough to keep
	// a small node busy without measuring throughput instead.
	densityParallel = 4
	// densitySettle lets fresh sandboxes finish booting (and their memory
	// settle) before it is read.
	densitySettle = 5 * time.Second
	// densityMinAvailable stops the measurement when the host has less than
	// this fraction of its memory available, before the kernel's OOM killer
	// picks something, when the server's own overcommit limit is generous.
	densityMinAvailable = 0.10
)

// measureDensity creates idle sandboxes of smallSandboxMB until DensityMax,
// a refusal by the node, a failed create or a host low on memory; then it
// reads what each one costs and deletes them all.
func (r *runner) measureDensity(ctx context.Context) error {
	ids, stoppedBy := r.fillNode(ctx)
	defer r.removeAll(context.WithoutCancel(ctx), "density cleanup", ids)
	if err := ctx.Err(); err != nil {
		return err
	}
	d := &Density{Sandboxes: len(ids), StoppedBy: stoppedBy}
	r.res.Density = d
	if len(ids) == 0 {
		return fmt.Errorf("no sandbox started: %s", stoppedBy)
	}
	r.progress.printf("density: %d sandboxes running (%s); letting them settle for %s", len(ids), stoppedBy, densitySettle)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(densitySettle):
	}
	r.readDensityMemory(d, ids)
	return nil
}

// fillNode starts sandboxes until one of the stop conditions; it returns
// those that run and why it stopped.
func (r *runner) fillNode(ctx context.Context) (ids []string, stoppedBy string) {
	var (
		mu      sync.Mutex
		stop    string
		started int // creates handed out, successful or not
	)
	// next hands out the right to create one more sandbox.
	next := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if stop != "" || ctx.Err() != nil {
			return false
		}
		if started >= r.cfg.DensityMax {
			stop = fmt.Sprintf("reached --density-max %d", r.cfg.DensityMax)
			return false
		}
		if total, avail := memInfo(); total > 0 && float64(avail) < densityMinAvailable*float64(total) {
			stop = fmt.Sprintf("host memory available fell below %.0f%% (%d MiB left)", densityMinAvailable*100, avail>>20)
			return false
		}
		started++
		return true
	}
	halt := func(reason string) {
		mu.Lock()
		defer mu.Unlock()
		if stop == "" {
			stop = reason
		}
	}
	r.progress.step(KeyDensity, 0, r.cfg.DensityMax, "")
	var wg sync.WaitGroup
	for range densityParallel {
		wg.Go(func() {
			for next() {
				sb, err := r.create(ctx, r.request(smallSandboxMB, longLifetimeS))
				switch {
				case isRefusal(err):
					halt("the node refused a sandbox: " + err.Error())
					continue
				case err != nil:
					halt("a create failed: " + err.Error())
					continue
				}
				if _, err := r.settle(ctx, sb, apiv1.StateRunning); err != nil {
					halt("a sandbox did not start: " + err.Error())
					_ = r.remove(context.WithoutCancel(ctx), sb.ID)
					continue
				}
				mu.Lock()
				ids = append(ids, sb.ID)
				n := len(ids)
				mu.Unlock()
				r.progress.step(KeyDensity, n, r.cfg.DensityMax, "running")
			}
		})
	}
	wg.Wait()
	if stop == "" && ctx.Err() != nil {
		stop = "interrupted"
	}
	return ids, stop
}

// readDensityMemory fills the per-sandbox memory figures from the host.
func (r *runner) readDensityMemory(d *Density, ids []string) {
	var cgroupTotal uint64
	readable := 0
	for _, id := range ids {
		if used, err := sandboxCgroupMemory(id); err == nil {
			cgroupTotal += used
			readable++
		}
	}
	if readable == len(ids) {
		d.MiBPerSandbox = perSandbox(float64(cgroupTotal)/(1<<20), len(ids))
	} else {
		r.res.note(KeyDensity, fmt.Sprintf("cgroup memory readable for %d of %d sandboxes (is the server on another host?); mib_per_sandbox left out", readable, len(ids)))
	}
	procs, err := sandboxProcessMemory(ids)
	if err != nil {
		r.res.note(KeyDensity, "reading /proc: "+err.Error())
		return
	}
	var rss, pss uint64
	for _, id := range ids {
		rss += procs[id].rssKiB
		pss += procs[id].pssKiB
	}
	if len(procs) == len(ids) {
		d.RSSMiBPerSandbox = perSandbox(float64(rss)/1024, len(ids))
		d.PSSMiBPerSandbox = perSandbox(float64(pss)/1024, len(ids))
	} else {
		r.res.note(KeyDensity, fmt.Sprintf("host processes found for %d of %d sandboxes; rss/pss left out", len(procs), len(ids)))
	}
	r.progress.printf("density: %d sandboxes, %s MiB each by cgroup, %s MiB RSS, %s MiB PSS",
		len(ids), formatOptional(d.MiBPerSandbox), formatOptional(d.RSSMiBPerSandbox), formatOptional(d.PSSMiBPerSandbox))
}

func perSandbox(totalMiB float64, n int) *float64 {
	v := math.Round(totalMiB/float64(n)*10) / 10
	return &v
}

func formatOptional(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.1f", *v)
}
