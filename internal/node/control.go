package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/sandboxid"
)

// The node is the contract's in-process implementation (data.go holds
// its data plane).
var (
	_ nodeapi.Control = (*Node)(nil)
	_ nodeapi.Events  = (*Node)(nil)
	_ nodeapi.Node    = (*Node)(nil)
)

// A node is reached over the network: every id and name it is given is
// checked before it reaches a path, a runtime command or a volume.

// checkID rejects what is not a sandbox id.
func checkID(id string) error {
	if !sandboxid.Valid(id) {
		return fmt.Errorf("%w: sandbox id %q", nodeapi.ErrInvalidName, id)
	}
	return nil
}

// checkTemplateID rejects a template id that is not one path segment.
func checkTemplateID(id string) error {
	if err := nodeapi.ValidName(id); err != nil || strings.Contains(id, "/") {
		return fmt.Errorf("%w: template id %q", nodeapi.ErrInvalidName, id)
	}
	return nil
}

func checkTemplate(t TemplateSpec) error {
	if err := checkTemplateID(t.ID); err != nil {
		return err
	}
	if err := nodeapi.ValidName(t.RootfsVolume); err != nil {
		return fmt.Errorf("template %s: root volume: %w", t.ID, err)
	}
	return nil
}

func checkCreateSpec(spec CreateSpec) error {
	if err := checkID(spec.ID); err != nil {
		return err
	}
	if err := checkTemplate(spec.Template); err != nil {
		return err
	}
	return spec.Template.CheckRuntime(spec.RuntimeName())
}

// Create starts a sandbox: cold, booted on a copy of its template's root
// volume, or (req.Warm) restored from the template's booted image of the
// create's backend, made on first use. A template that cannot be booted
// warm is booted cold.
func (n *Node) Create(ctx context.Context, req nodeapi.CreateRequest) (err error) {
	spec := req.Spec
	if err := checkCreateSpec(spec); err != nil {
		return err
	}
	if _, err := n.backendNamed(spec.RuntimeName()); err != nil {
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	defer n.lifecycle.lock(req.Spec.ID)()
	// Counted from now on, so placement sees a create in flight.
	n.commit(spec.ID, spec.Limits)
	defer func() {
		if err != nil {
			n.uncommit(spec.ID)
		}
	}()
	// Pool refills wait while a create someone waits for runs.
	n.pools.active.enter()
	defer n.pools.active.leave()
	// The template's booted image was checkpointed without the
	// sandbox's volume mounts, and a restore must find the mounts its
	// image was taken with: a sandbox that mounts volumes boots.
	if !req.Warm || len(spec.Mounts) > 0 {
		return n.create(ctx, spec)
	}
	// Each backend restores its own image of the template; a bootSized
	// one, an image of the create's own size.
	img, err := n.templateImage(ctx, spec.Template, n.imageKeyFor(spec.Template, spec.RuntimeName(), spec.Limits), false)
	if err != nil {
		n.log.Warn("no template image; booting instead", "template", spec.Template.ID, "runtime", spec.RuntimeName(), "err", err)
		return n.create(ctx, spec)
	}
	return n.createFromImage(ctx, img, spec, req.Identity)
}

// Sandboxes lists the ids of the sandboxes the runtime runs (build
// sandboxes and pooled ones included).
func (n *Node) Sandboxes(ctx context.Context) ([]string, error) {
	ids, err := n.listAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return ids, nil
}

// Info describes the node: its configured capacity, the sandboxes it
// tracks, the limits committed to the sandboxes it runs, the free memory
// and disk, its template images and pools.
func (n *Node) Info(ctx context.Context) (nodeapi.Info, error) {
	n.mu.Lock()
	count := len(n.sandboxes)
	var vcpus, memoryMB int
	for _, l := range n.committed {
		vcpus += l.VCPUs
		memoryMB += l.MemoryMB
	}
	n.mu.Unlock()
	tpls, err := n.TemplateImages(ctx)
	if err != nil {
		return nodeapi.Info{}, err
	}
	info := nodeapi.Info{
		ID: n.cfg.ID, VCPUs: n.cfg.Capacity.VCPUs, MemoryMB: n.cfg.Capacity.MemoryMB, DiskMB: n.cfg.Capacity.DiskMB,
		Sandboxes: count, DiskFreeMB: diskFreeMB(n.cfg.Volumes.Path("")), MemoryFreeMB: memoryFreeMB(),
		VCPUsCommitted: vcpus, MemoryCommittedMB: memoryMB, TemplateImages: tpls,
		Runtimes: n.isolations(),
	}
	if pools := n.poolStatuses(); len(pools) > 0 {
		info.Pools = pools
	}
	return info, nil
}

// diskFreeMB is what unprivileged writers may still use of dir's
// filesystem; -1 when it cannot be read.
func diskFreeMB(dir string) int {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil {
		return -1
	}
	return int(fs.Bavail * uint64(fs.Bsize) >> 20)
}

// memoryFreeMB is the kernel's estimate of memory available without
// swapping (MemAvailable); -1 when it cannot be read.
func memoryFreeMB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int
		if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %d kB", &kb); err == nil {
			return kb / 1024
		}
	}
	return -1
}
