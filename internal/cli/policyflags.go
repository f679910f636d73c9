package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/server"
)

// The defaults of the --project-* quotas: generous, so that no ordinary
// use meets them, and finite, so that a fresh install bounds what one
// project's keys can make the shared server hold (issue #31). An admin
// raises them for every project with these flags or for one with
// `space projects set`.
const (
	// DefaultProjectMaxSandboxes is above the density `space bench`
	// measures (--density-max 300).
	DefaultProjectMaxSandboxes = 500
	// DefaultProjectMaxMemoryMB is memory_mb summed over a project's
	// sandboxes, which a node overcommits: 256 GiB.
	DefaultProjectMaxMemoryMB  = 256 << 10
	DefaultProjectMaxSnapshots = 1000
	// DefaultProjectMaxVolumeMB is size_mb summed over a project's
	// volumes: 200 GiB.
	DefaultProjectMaxVolumeMB = 200 << 10
	// DefaultProjectTemplateDiskMB: a few dozen templates of a usual
	// size, or five at the build disk limit (4,096 MiB), fit.
	DefaultProjectTemplateDiskMB = 20 << 10
	// DefaultProjectCreatesPerSecond is twice what one client creating
	// pooled sandboxes back to back reaches (about 100 a second).
	DefaultProjectCreatesPerSecond = 200
)

// policyFlags are the flags of what a control plane allows and gives by
// default: `space serve` and `space control-plane` take the same ones, so
// that an operator moving to a cluster keeps every setting.
type policyFlags struct {
	defaults    *controlplane.Defaults
	http        *server.HTTPLimits
	quota       *project.Quota
	maxRequests *int
	maxUploads  *int
}

func addPolicyFlags(fs *flagSet, defaults *controlplane.Defaults, http *server.HTTPLimits, quota *project.Quota, maxRequests, maxUploads *int) policyFlags {
	p := policyFlags{defaults: defaults, http: http, quota: quota, maxRequests: maxRequests, maxUploads: maxUploads}
	fs.DurationVar(&p.http.ReadHeaderTimeout, "http-read-header-timeout", p.http.ReadHeaderTimeout, "how long a client of any listener (API, E2B API, proxy) may take to send a request's headers")
	fs.DurationVar(&p.http.IdleTimeout, "http-idle-timeout", p.http.IdleTimeout, "close keep-alive connections of any listener after this long without a request")
	fs.IntVar(&p.http.MaxConnections, "http-max-connections", p.http.MaxConnections, "connections open at once on each listener (0: unlimited); further ones wait until one closes")
	fs.IntVar(&p.defaults.TimeoutS, "default-timeout-s", p.defaults.TimeoutS, "lifetime of a sandbox whose create request names none")
	fs.StringVar(&p.defaults.Template, "default-template", p.defaults.Template, "template of a create request that names none")
	fs.DurationVar(&p.defaults.Retention, "retention", p.defaults.Retention, "how long stopped and failed sandboxes stay visible")
	fs.IntVar(&p.defaults.IdleSuspendS, "idle-suspend-s", p.defaults.IdleSuspendS, "suspend a sandbox after this many seconds without activity (default for sandboxes that name none)")
	fs.DurationVar(&p.defaults.SuspendedRetention, "suspended-retention", p.defaults.SuspendedRetention, "delete suspended sandboxes after this long")
	fs.DurationVar(&p.defaults.SnapshotRetention, "snapshot-retention", p.defaults.SnapshotRetention, "keep rolling snapshots this long (default for sandboxes that name none)")
	fs.DurationVar(&p.defaults.MinSnapshotInterval, "min-snapshot-interval", p.defaults.MinSnapshotInterval, "the shortest snapshot_interval_s a sandbox may ask for (each rolling snapshot captures memory and disk)")
	fs.IntVar(&p.defaults.BandwidthMbit, "sandbox-bandwidth-mbit", p.defaults.BandwidthMbit, "bandwidth of each sandbox's network in Mbit/s, each way (0: unlimited); create requests may ask for less")
	fs.IntVar(&p.defaults.MaxConnections, "sandbox-max-connections", p.defaults.MaxConnections, "connections each sandbox may have open at once (0: unlimited); create requests may ask for fewer")
	fs.IntVar(&p.quota.MaxSandboxes, "project-max-sandboxes", DefaultProjectMaxSandboxes, "sandboxes each project may have at once, suspended ones included (0: unlimited; PUT /v1/projects/{name} sets one project's)")
	fs.IntVar(&p.quota.MaxMemoryMB, "project-max-memory-mb", DefaultProjectMaxMemoryMB, "sum of memory_mb of each project's sandboxes (0: unlimited)")
	fs.IntVar(&p.quota.MaxSnapshots, "project-max-snapshots", DefaultProjectMaxSnapshots, "snapshots each project may keep, rolling ones included (0: unlimited)")
	fs.IntVar(&p.quota.MaxVolumeMB, "project-max-volume-mb", DefaultProjectMaxVolumeMB, "sum of size_mb of each project's volumes (0: unlimited)")
	fs.IntVar(&p.quota.MaxTemplateDiskMB, "project-max-template-disk-mb", DefaultProjectTemplateDiskMB, "sum of the sizes of each project's built templates (0: unlimited)")
	fs.Float64Var(&p.quota.CreatesPerSecond, "project-creates-per-second", DefaultProjectCreatesPerSecond, "sandbox creates a second for each project, branches counting one each (0: unlimited)")
	fs.IntVar(p.maxRequests, "max-requests-per-key", api.DefaultMaxRequestsPerKey, "requests (streams included) one API key may have in flight on the API and the E2B API together; past it 429")
	fs.IntVar(p.maxUploads, "max-uploads-per-key", api.DefaultMaxUploadsPerKey, "uploads (file and volume writes, template archives) one API key may have in flight on both APIs; past it 429")
	return p
}

// check refuses values no control plane can work with.
func (p policyFlags) check(fs *flagSet) error {
	if p.quota.MaxSandboxes < 0 || p.quota.MaxMemoryMB < 0 || p.quota.MaxSnapshots < 0 || p.quota.CreatesPerSecond < 0 || p.quota.MaxVolumeMB < 0 || p.quota.MaxTemplateDiskMB < 0 {
		return fs.usageErrorf("--project-* quotas must be 0 (unlimited) or positive")
	}
	if *p.maxRequests < 1 || *p.maxUploads < 1 {
		return fs.usageErrorf("--max-requests-per-key and --max-uploads-per-key must be positive")
	}
	if p.defaults.BandwidthMbit < 0 || p.defaults.MaxConnections < 0 {
		return fs.usageErrorf("--sandbox-bandwidth-mbit and --sandbox-max-connections must be 0 (unlimited) or positive")
	}
	if p.defaults.MinSnapshotInterval < time.Second {
		return fs.usageErrorf("--min-snapshot-interval must be at least 1s")
	}
	if p.http.ReadHeaderTimeout <= 0 || p.http.IdleTimeout <= 0 || p.http.MaxConnections < 0 {
		return fs.usageErrorf("--http-read-header-timeout and --http-idle-timeout must be positive, --http-max-connections 0 (unlimited) or positive")
	}
	return nil
}

// parsePoolSizes reads --pool: template=size pairs, comma-separated.
func parsePoolSizes(fs *flagSet, s string) (map[string]int, error) {
	sizes := map[string]int{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, size, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 0 {
			return nil, fs.usageErrorf("--pool wants template=size pairs, got %q", p)
		}
		sizes[name] = n
	}
	return sizes, nil
}
