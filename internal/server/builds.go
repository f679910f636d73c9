package server

import (
	"context"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/template"
)

// buildMemoryMB is the least memory a build sandbox gets: apt and dpkg
// need more than a small default sandbox may have.
const buildMemoryMB = 1024

// buildShape sizes a build sandbox from the defaults of ordinary
// sandboxes (DefaultConfig's when d is zero: a node that was told none),
// with at least buildMemoryMB of memory. Serve's node, a cluster's node
// and the catalog's placement of a build all size it so.
func buildShape(d controlplane.Defaults) (runtime.Limits, int64) {
	if d == (controlplane.Defaults{}) {
		d = DefaultConfig().Defaults
	}
	return runtime.Limits{VCPUs: d.VCPUs, MemoryMB: max(d.MemoryMB, buildMemoryMB), Pids: d.Pids}, int64(d.DiskMB) << 20
}

// buildSandboxes runs template builds in node sandboxes under the
// default policy of sandboxes: internet on, so apt works, and the host,
// its uplinks, metadata and private ranges closed as for every sandbox.
type buildSandboxes struct {
	node   *node.Node
	limits runtime.Limits
}

func (b buildSandboxes) Start(ctx context.Context, volume string) (template.BuildSandbox, error) {
	return b.node.StartBuild(ctx, volume, b.limits, network.Policy{AllowInternet: true})
}
