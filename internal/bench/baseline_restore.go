package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/gvisor"
)

// bootedImageDir holds the template's pre-booted memory image.
func (r *runner) bootedImageDir() string {
	return filepath.Join(r.cfg.DataDir, "images", "templates", r.res.Template.ID)
}

// bootedVolume is the read-only filesystem the pre-booted image was taken on.
func (r *runner) bootedVolume() string {
	return filepath.Join(r.cfg.DataDir, "volumes", "templates", r.res.Template.ID+"-booted")
}

// measureRunscRestore times `runsc restore --detach` of the template's
// pre-booted image, with the runsc flags and OCI bundle the server uses
// (through internal/runtime/gvisor), onto a writable btrfs snapshot of the
// booted volume, in a fresh network slot. Only the restore (bundle writing
// included) is timed; the snapshot, slot and teardown are not. It is the
// floor for starting a sandbox from a pre-booted image.
func (r *runner) measureRunscRestore(ctx context.Context) (*Summary, error) {
	if err := r.baselinePrerequisite(); err != nil {
		return nil, err
	}
	imageDir, booted := r.bootedImageDir(), r.bootedVolume()
	if !fileExists(imageDir) {
		return nil, absent("no pre-booted image of template %s at %s (the server predates pre-booted templates or has not made one yet)", r.cfg.Template, imageDir)
	}
	if !fileExists(booted) {
		return nil, absent("pre-booted image without its booted volume %s", booted)
	}
	// The agent the image holds in memory: the node keeps each binary
	// under its digest (node/agents/<digest>), which the image records;
	// nodes from before the store kept one, in node/agent.
	agentDir := filepath.Join(r.cfg.DataDir, "node", "agent")
	if digest, err := os.ReadFile(filepath.Join(imageDir, "agent-digest")); err == nil {
		agentDir = filepath.Join(r.cfg.DataDir, "node", "agents", strings.TrimSpace(string(digest)))
	}
	if !fileExists(agentDir) {
		return nil, absent("no agent directory %s (is --data-dir %s the server's?)", agentDir, r.cfg.DataDir)
	}
	limits, err := readImageLimits(imageDir)
	if err != nil {
		return nil, err
	}
	stateDir, err := os.MkdirTemp("", "space-bench-restore-")
	if err != nil {
		return nil, err
	}
	defer removeRunscDir(stateDir)
	// Slots of its own, unmounted with the state directory.
	slots, err := network.OpenNamespaces(filepath.Join(stateDir, "netns"))
	if err != nil {
		return nil, err
	}
	rt, err := gvisor.New(gvisor.Config{RunscPath: r.cfg.RunscPath, StateDir: stateDir, Platform: "systrap", Namespaces: slots})
	if err != nil {
		return nil, err
	}
	return r.sample(ctx, KeyBaselineRunscRestore, func(ctx context.Context, _ int) (time.Duration, error) {
		return r.restoreOnce(ctx, rt, slots, imageDir, booted, agentDir, limits)
	})
}

// restoreOnce restores the image once and tears everything down again.
func (r *runner) restoreOnce(ctx context.Context, rt *gvisor.Runtime, slots *network.Namespaces, imageDir, booted, agentDir string, limits runtime.Limits) (time.Duration, error) {
	// Short: the id names two network namespaces and a cgroup.
	id := "bench" + randomHex(6)
	volume := filepath.Join(r.cfg.DataDir, "volumes", "space-bench-"+id)
	if err := btrfs(ctx, "subvolume", "snapshot", booted, volume); err != nil {
		return 0, err
	}
	defer func() { _ = btrfs(context.WithoutCancel(ctx), "subvolume", "delete", volume) }()
	slot, err := slots.Create(id)
	if err != nil {
		return 0, err
	}
	defer func() { _ = slot.Destroy() }()
	spec := runtime.Spec{
		ID: id, Rootfs: runtime.Rootfs{Kind: runtime.RootfsDir, Path: volume}, Network: slot,
		Agent:    filepath.Join(agentDir, "space-agent"),
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Hostname: id,
		Limits:   limits,
	}
	d, err := timed(func() error { return rt.Restore(ctx, spec, imageDir) })
	if destroyErr := rt.Destroy(context.WithoutCancel(ctx), id); destroyErr != nil {
		err = errors.Join(err, destroyErr)
	}
	return d, err
}

// readImageLimits reads the limits the image was taken with from its
// meta.json, so the restore runs under the same ones; fields it does not
// find stay zero (no limit).
func readImageLimits(imageDir string) (runtime.Limits, error) {
	raw, err := os.ReadFile(filepath.Join(imageDir, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return runtime.Limits{}, nil
	}
	if err != nil {
		return runtime.Limits{}, err
	}
	// The layout is the image writer's; accept the limits at the top level
	// or under "limits".
	var meta struct {
		imageLimits
		Nested *imageLimits `json:"limits"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return runtime.Limits{}, fmt.Errorf("read %s/meta.json: %w", imageDir, err)
	}
	found := meta.imageLimits
	if meta.Nested != nil {
		found = *meta.Nested
	}
	limits := runtime.Limits{VCPUs: found.VCPUs, MemoryMB: found.MemoryMB, Pids: found.Pids}
	return limits, nil
}

// imageLimits are the limits fields meta.json may carry.
type imageLimits struct {
	MemoryMB int `json:"memory_mb"`
	VCPUs    int `json:"vcpus"`
	Pids     int `json:"pids"`
}

func btrfs(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "btrfs", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
