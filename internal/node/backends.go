package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// A node holds several backends (Config.Runtimes). Each sandbox runs on
// one, chosen at its create and kept for its life: the node records the
// name under its state directory, so that a node restarted under running
// sandboxes adopts each through its own backend, and every image it
// takes records the backend too, so that an image is only ever restored by
// the backend that took it.

// sandboxRuntimesDir holds one file per sandbox under StateDir, naming its
// backend.
const sandboxRuntimesDir = "runtimes"

// imageRuntimeFile names the backend a checkpoint image was taken by.
const imageRuntimeFile = "space-runtime"

// errNoBackend says the node has no backend of that name.
func errNoBackend(name string) error {
	return fmt.Errorf("%w: this node has no %s runtime", nodeapi.ErrNoRuntime, name)
}

// backendNamed returns the backend name, or why the node has none.
func (n *Node) backendNamed(name string) (runtime.Runtime, error) {
	if rt, ok := n.cfg.Runtimes[name]; ok {
		return rt, nil
	}
	return nil, errNoBackend(name)
}

// runtimeNames are the node's backends, sorted.
func (n *Node) runtimeNames() []string {
	names := make([]string, 0, len(n.cfg.Runtimes))
	for name := range n.cfg.Runtimes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// isolations are the node's backends with the isolation each gives, as
// its Info reports them.
func (n *Node) isolations() map[string]string {
	out := make(map[string]string, len(n.cfg.Runtimes))
	for name, rt := range n.cfg.Runtimes {
		out[name] = rt.Isolation()
	}
	return out
}

func (n *Node) runtimeRecordPath(id string) string {
	return filepath.Join(n.cfg.StateDir, sandboxRuntimesDir, id)
}

// recordRuntime notes that sandbox id runs on backend name, durably: an
// adoption after a restart reads it.
func (n *Node) recordRuntime(id, name string) error {
	if err := os.MkdirAll(filepath.Join(n.cfg.StateDir, sandboxRuntimesDir), 0o755); err != nil {
		return fmt.Errorf("record the runtime of %s: %w", id, err)
	}
	if err := writeFileSync(n.runtimeRecordPath(id), []byte(name)); err != nil {
		n.runtimeOf.Delete(id)
		return fmt.Errorf("record the runtime of %s: %w", id, err)
	}
	n.runtimeOf.Store(id, name)
	return nil
}

// recordedRuntime is the backend sandbox id runs on: gVisor for a sandbox
// started before nodes recorded it (gVisor was the only one). The record
// is read once per node process and then kept in memory.
func (n *Node) recordedRuntime(id string) string {
	if name, ok := n.runtimeOf.Load(id); ok {
		return name.(string)
	}
	b, err := os.ReadFile(n.runtimeRecordPath(id))
	if name := strings.TrimSpace(string(b)); err == nil && name != "" {
		n.runtimeOf.Store(id, name)
		return name
	}
	return runtime.GVisor
}

// recordedRuntimeIDs are the sandboxes with a runtime record: those whose
// release has not dropped it yet.
func (n *Node) recordedRuntimeIDs() []string {
	return dirNames(filepath.Join(n.cfg.StateDir, sandboxRuntimesDir))
}

func (n *Node) forgetRuntime(id string) {
	n.runtimeOf.Delete(id)
	_ = os.Remove(n.runtimeRecordPath(id))
}

// dirNames are the names in a directory of per-sandbox records (none if
// it cannot be read: no record was ever written).
func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// rt is the backend of sandbox id. A sandbox recorded on a backend this
// node is no longer configured with gets one that refuses everything but
// a destroy, so that its volumes and slot can still be released.
func (n *Node) rt(id string) runtime.Runtime {
	name := n.recordedRuntime(id)
	if rt, ok := n.cfg.Runtimes[name]; ok {
		return rt
	}
	return absentRuntime{name: name}
}

// listAll lists the sandboxes of every backend.
func (n *Node) listAll(ctx context.Context) ([]string, error) {
	var ids []string
	for _, name := range n.runtimeNames() {
		got, err := n.cfg.Runtimes[name].List(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s runtime: %w", name, err)
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// stampImageRuntime records in an image directory the backend of the
// sandbox it is taken of.
func (n *Node) stampImageRuntime(imageDir, id string) error {
	if err := writeFileSync(filepath.Join(imageDir, imageRuntimeFile), []byte(n.recordedRuntime(id))); err != nil {
		return fmt.Errorf("record the image's runtime: %w", err)
	}
	return nil
}

// imageRuntime is the backend an image was taken by: gVisor for images
// from before images recorded it.
func imageRuntime(imageDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, imageRuntimeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return runtime.GVisor, nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// restoreBackend is the backend that restores an image: the one that took
// it. want, if set, is the one the caller expects; another is refused,
// as is an image of a backend this node lacks.
func (n *Node) restoreBackend(imageDir, want string) (string, runtime.Runtime, error) {
	name, err := imageRuntime(imageDir)
	if err != nil {
		return "", nil, err
	}
	if want != "" && want != name {
		return "", nil, fmt.Errorf("%w: the image was taken under the %s runtime and is never restored by the %s runtime", nodeapi.ErrNoRuntime, name, want)
	}
	rt, err := n.backendNamed(name)
	if err != nil {
		return "", nil, err
	}
	return name, rt, nil
}

// absentRuntime stands for a backend a sandbox was recorded on that the
// node no longer has.
type absentRuntime struct{ name string }

func (a absentRuntime) err() error { return errNoBackend(a.name) }

func (a absentRuntime) Start(context.Context, runtime.Spec) error { return a.err() }
func (a absentRuntime) Restore(context.Context, runtime.Spec, string) error {
	return a.err()
}
func (a absentRuntime) Checkpoint(context.Context, string, string, bool) error { return a.err() }
func (a absentRuntime) Pause(context.Context, string) error                    { return a.err() }
func (a absentRuntime) Resume(context.Context, string) error                   { return a.err() }

// Destroy has nothing to remove: no backend of this node holds the sandbox.
func (a absentRuntime) Destroy(context.Context, string) error { return nil }
func (a absentRuntime) State(context.Context, string) (runtime.State, error) {
	return runtime.State{}, runtime.ErrNotFound
}
func (a absentRuntime) List(context.Context) ([]string, error) { return nil, nil }
func (a absentRuntime) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{}, a.err()
}
func (a absentRuntime) DialAgent(context.Context, string) (net.Conn, error) { return nil, a.err() }
func (a absentRuntime) Wait(context.Context, string) (runtime.ExitReason, error) {
	return runtime.ExitDied, nil
}
func (a absentRuntime) Limits(string) (runtime.Limits, error) { return runtime.Limits{}, a.err() }
func (a absentRuntime) Quiesce(context.Context, string) error { return nil }
func (a absentRuntime) Isolation() string                     { return "" }
