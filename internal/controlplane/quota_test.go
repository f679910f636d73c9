package controlplane

import (
	"errors"
	"testing"
	"time"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

type fixedQuotas struct {
	q    project.Quota
	wait time.Duration
}

func (f fixedQuotas) Of(string) project.Quota { return f.q }
func (f fixedQuotas) AllowCreate(string, int) (time.Duration, bool) {
	return f.wait, f.wait == 0
}

func TestQuotaCountsOnlyTheProjectsLiveSandboxes(t *testing.T) {
	cp := &ControlPlane{cfg: Config{Quotas: fixedQuotas{q: project.Quota{MaxSandboxes: 2, MaxMemoryMB: 1024}}}, sandboxes: map[string]*record{}}
	add := func(id, proj, state string, mem int) {
		cp.sandboxes[id] = &record{Sandbox: Sandbox{ID: id, Project: proj, State: state, MemoryMB: mem}}
	}
	add("a1", "a", apiv1.StateRunning, 512)
	add("a2", "a", apiv1.StateStopped, 512) // ended: does not count
	add("a3", "a", apiv1.StateFailed, 512)
	add("b1", "b", apiv1.StateRunning, 512)
	add("b2", "b", apiv1.StateSuspended, 256) // may resume: counts
	add("d1", "", apiv1.StateRunning, 512)    // recorded before projects: default
	var qe *QuotaError
	if err := cp.checkQuota("a", 512); err != nil {
		t.Fatalf("a has 1 of 2 sandboxes and 512 of 1024 MiB: %v", err)
	}
	if err := cp.checkQuota("a", 513); !errors.As(err, &qe) || qe.Project != "a" || qe.RetryAfter != 0 {
		t.Fatalf("a past its memory: %v", err)
	}
	if err := cp.checkQuota("b", 32); !errors.As(err, &qe) || qe.Project != "b" {
		t.Fatalf("b has 2 of 2 sandboxes: %v", err)
	}
	if err := cp.checkQuota(project.Default, 512); err != nil {
		t.Fatalf("default has 1 of 2 sandboxes: %v", err)
	}
	if u := cp.usage(""); u.Sandboxes != 1 || u.MemoryMB != 512 {
		t.Fatalf("usage of default = %+v", u)
	}

	cp.cfg.Quotas = fixedQuotas{q: project.Quota{CreatesPerSecond: 1}, wait: 1300 * time.Millisecond}
	if err := cp.allowCreates("a", 1); !errors.As(err, &qe) || qe.RetryAfter != 2*time.Second {
		t.Fatalf("rate refusal %v: want Retry-After rounded up to 2s", err)
	}
	cp.cfg.Quotas = nil
	if err := cp.checkQuota("b", 1<<20); err != nil {
		t.Fatalf("no quotas configured: %v", err)
	}
}

// A template build holds a place and memory of its project's quota until
// it ends, against other builds and creates alike.
func TestBuildsAreChargedToTheProjectsQuota(t *testing.T) {
	cp := &ControlPlane{cfg: Config{Quotas: fixedQuotas{q: project.Quota{MaxSandboxes: 2, MaxMemoryMB: 2048}}}, sandboxes: map[string]*record{}}
	release, err := cp.ChargeBuild("a", 1024)
	if err != nil {
		t.Fatalf("a's first build: %v", err)
	}
	var qe *QuotaError
	if _, err := cp.ChargeBuild("a", 1536); !errors.As(err, &qe) || qe.Project != "a" {
		t.Fatalf("a second build past a's memory: %v", err)
	}
	if u := cp.usage("a"); u.Sandboxes != 1 || u.MemoryMB != 1024 {
		t.Fatalf("a's usage with a build running = %+v", u)
	}
	cp.sandboxes["s"] = &record{Sandbox: Sandbox{ID: "s", Project: "a", State: apiv1.StateRunning, MemoryMB: 512}}
	if err := cp.checkQuota("a", 32); !errors.As(err, &qe) {
		t.Fatalf("a create with a build and a sandbox holding both places: %v", err)
	}
	if _, err := cp.ChargeBuild("b", 1024); err != nil {
		t.Fatalf("another project's build: %v", err)
	}
	release()
	release() // twice: still one place back
	if u := cp.usage("a"); u.Sandboxes != 1 || u.MemoryMB != 512 {
		t.Fatalf("a's usage after its build ended = %+v", u)
	}
	if _, err := cp.ChargeBuild("a", 1024); err != nil {
		t.Fatalf("a build once the first ended: %v", err)
	}
}
