package cli

import (
	"testing"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/server"
)

// A fresh install bounds every project: no --project-* quota defaults to
// 0 (unlimited), and an admin can still lift one with 0 or raise it.
func TestProjectQuotasAreFiniteByDefault(t *testing.T) {
	parse := func(args ...string) project.Quota {
		t.Helper()
		var (
			defaults controlplane.Defaults
			limits   server.HTTPLimits
			quota    project.Quota
			requests int
			uploads  int
		)
		fs := newFlagSet("space serve", "")
		addPolicyFlags(fs, &defaults, &limits, &quota, &requests, &uploads)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return quota
	}
	q := parse()
	for name, v := range map[string]float64{
		"max sandboxes": float64(q.MaxSandboxes), "max memory": float64(q.MaxMemoryMB), "max snapshots": float64(q.MaxSnapshots),
		"max volume": float64(q.MaxVolumeMB), "max template disk": float64(q.MaxTemplateDiskMB), "creates per second": q.CreatesPerSecond,
	} {
		if v <= 0 {
			t.Errorf("%s defaults to %g: unlimited on a fresh install", name, v)
		}
	}
	if q.MaxSandboxes < 300 {
		t.Errorf("max sandboxes %d is below what `space bench` measures (--density-max 300)", q.MaxSandboxes)
	}
	if q := parse("--project-max-sandboxes", "0", "--project-max-memory-mb", "1048576"); q.MaxSandboxes != 0 || q.MaxMemoryMB != 1<<20 {
		t.Errorf("an admin's flags were not taken: %+v", q)
	}
}
