package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-platform/space/internal/crashpoint"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// The node's control values are the contract's (see nodeapi).
type (
	TemplateSpec = nodeapi.TemplateSpec
	CreateSpec   = nodeapi.CreateSpec
)

// Sandbox is the node's handle of one running sandbox.
type Sandbox struct {
	ID    string
	Agent *AgentConn
	// watch is the wait for the sandbox's runtime to end (watch.go); nil
	// while the node itself stops or suspends the sandbox.
	watch atomic.Pointer[watching]

	mu       sync.Mutex
	sessions map[string]*Session
	// startingSessions are the places reserveSession holds for sessions
	// that are starting.
	startingSessions int
	// suspendImage is the image the sandbox was last suspended into while
	// it stays suspended; a send of it carries the sessions (journal_export.go).
	suspendImage string
	// portConns are the open DialPort connections (proxy_support.go).
	portConns map[*portConn]struct{}
	// agentDigest is the agent binary the sandbox's runtime mounts (the
	// one an image of it holds; agents.go).
	agentDigest string
	node        *Node
}

func (sb *Sandbox) setAgent(digest string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.agentDigest = digest
}

func (sb *Sandbox) agent() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.agentDigest
}

// How long a new sandbox's agent and ready check may take.
const (
	agentStartTimeout = 30 * time.Second
	readyTimeout      = 2 * time.Minute
)

// agentStartBound is a backend whose sandboxes may take longer than
// agentStartTimeout from their start to their agent answering: a guest
// boots a kernel first, and under emulation (TCG) on a busy host that
// takes tens of seconds.
type agentStartBound interface {
	AgentStartTimeout() time.Duration
}

func volumeName(id string) string { return path.Join("sandboxes", id) }

// create boots a sandbox cold: a copy-on-write snapshot of the template's
// root, a network slot, the runtime, then the agent's identity. On failure
// everything already made is released again.
func (n *Node) create(ctx context.Context, spec CreateSpec) (err error) {
	defer func() {
		if err != nil {
			if cerr := n.release(context.WithoutCancel(ctx), spec.ID); cerr != nil {
				n.log.Error("cleanup after failed create", "sandbox", spec.ID, "err", cerr)
			}
		}
	}()
	vol := volumeName(spec.ID)
	if err := n.makeRootVolume(ctx, spec.Template, spec.RuntimeName(), vol); err != nil {
		return fmt.Errorf("root volume: %w", err)
	}
	backend, err := n.backendNamed(spec.RuntimeName())
	if err != nil {
		return err
	}
	if err := n.setDiskLimit(backend, vol, spec.DiskMB); err != nil {
		return fmt.Errorf("disk limit: %w", err)
	}
	crashpoint.Hit("copy-volume")
	return n.boot(ctx, spec)
}

// makeRootVolume makes a new sandbox's root volume vol from its template,
// in constant time: a snapshot of the template's rootfs for a backend that
// boots the directory (gVisor), or, for one that boots a disk image
// (runtime.BlockRootfs), a new volume holding a clone of the image the
// backend made of the template at its build.
func (n *Node) makeRootVolume(ctx context.Context, tpl TemplateSpec, rtName, vol string) error {
	backend, err := n.backendNamed(rtName)
	if err != nil {
		return err
	}
	block, ok := backend.(runtime.BlockRootfs)
	if !ok {
		_, err := n.cfg.Volumes.Snapshot(tpl.RootfsVolume, vol, false)
		return err
	}
	artifact := tpl.ArtifactVolume(rtName)
	if !n.cfg.Volumes.Exists(artifact) {
		return fmt.Errorf("template %s has no %s image (rebuild it with runtime %s in its recipe)", tpl.ID, rtName, rtName)
	}
	dir, err := n.cfg.Volumes.Create(vol)
	if err != nil {
		return err
	}
	src := filepath.Join(n.cfg.Volumes.Path(artifact), block.RootImage())
	if err := block.CloneRootImage(ctx, src, filepath.Join(dir, block.RootImage())); err != nil {
		_ = n.cfg.Volumes.Delete(vol)
		return err
	}
	return nil
}

// boot starts the runtime on the sandbox's existing root volume and gives
// the agent its identity.
func (n *Node) boot(ctx context.Context, spec CreateSpec) error {
	env := map[string]string{}
	for k, v := range spec.Template.Env {
		env[k] = v
	}
	// As a restored or claimed sandbox's identity has it (the create's
	// own env may still say otherwise).
	env["SPACE_SANDBOX_ID"] = spec.ID
	for k, v := range spec.Env {
		env[k] = v
	}
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	sb, err := n.startAgent(ctx, spec.ID, spec.RuntimeName(), volumeName(spec.ID), spec.DiskMB, spec.Limits, spec.Network, spec.Mounts, agentInit{
		AccessToken:    spec.AccessToken,
		EnvVars:        env,
		DefaultUser:    spec.Template.User,
		DefaultWorkdir: spec.Template.Workdir,
		Hostname:       spec.ID,
		Entropy:        entropy,
	})
	if err != nil {
		return err
	}
	n.register(sb)
	n.track(ctx, sb)
	return sb.startTemplateCommand(ctx, spec.Template)
}

// startAgent is the start every sandbox shares, users' and builds': a
// network slot under policy, the runtime on volume (a disk image grown to
// diskMB, 0 leaving it) with the agent as its
// first process (holding a boot token only), then the agent's init with in
// (stamped with the time now). The sandbox it returns is not registered.
func (n *Node) startAgent(ctx context.Context, id, rtName, volume string, diskMB int, limits runtime.Limits, policy network.Policy, mounts []nodeapi.VolumeMount, in agentInit) (*Sandbox, error) {
	backend, err := n.backendNamed(rtName)
	if err != nil {
		return nil, err
	}
	binds, err := n.runtimeMounts(backend, volume, mounts)
	if err != nil {
		return nil, err
	}
	// Before the start: a release after a failed one, and an adoption
	// after a restart, go to this backend.
	if err := n.recordRuntime(id, rtName); err != nil {
		return nil, err
	}
	slot, err := n.cfg.Namespaces.Create(id)
	if err != nil {
		return nil, err
	}
	if err := n.applyNetwork(slot, policy); err != nil {
		return nil, err
	}
	if err := n.agents.record(id, n.agentDigest); err != nil {
		return nil, fmt.Errorf("record the agent of %s: %w", id, err)
	}
	bootToken := randomHex(32)
	rs := runtime.Spec{
		ID:      id,
		Rootfs:  n.rootfs(backend, volume, diskMB),
		Network: slot,
		Agent:   n.agents.binary(n.agentDigest),
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SPACE_AGENT_TOKEN=" + bootToken,
		},
		Hostname: in.Hostname,
		Limits:   limits,
		Mounts:   binds,
	}
	if err := backend.Start(ctx, rs); err != nil {
		return nil, err
	}
	sb := n.newSandbox(id, bootToken)
	sb.setAgent(n.agentDigest)
	bound := agentStartTimeout
	if b, ok := backend.(agentStartBound); ok {
		bound = b.AgentStartTimeout()
	}
	startCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := n.waitStarted(startCtx, sb); err != nil {
		return nil, err
	}
	in.Timestamp = time.Now().UTC()
	if err := sb.Agent.init(startCtx, in); err != nil {
		return nil, err
	}
	return sb, nil
}

// waitStarted waits, within ctx, for the agent of a sandbox its backend
// has just started or restored to answer, and gives up as soon as the
// backend reports the sandbox ended meanwhile (a guest that died booting,
// a QEMU killed for its memory), saying so, rather than polling a channel
// nothing will ever answer until ctx ends. The watch begins only after
// startWatchDelay: asking a backend (runsc state is a process) costs more
// than most agents take to answer.
func (n *Node) waitStarted(ctx context.Context, sb *Sandbox) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan runtime.ExitReason, 1)
	watch := time.AfterFunc(startWatchDelay, func() {
		if reason, err := n.rt(sb.ID).Wait(ctx, sb.ID); err == nil {
			ended <- reason
			cancel()
		}
	})
	defer watch.Stop()
	err := sb.Agent.waitHealthy(ctx)
	if err != nil {
		select {
		case reason := <-ended:
			return fmt.Errorf("sandbox %s ended before its agent answered (%s)", sb.ID, reason)
		default:
		}
	}
	return err
}

// startWatchDelay is how long waitStarted polls an agent before it also
// watches for the sandbox's end.
const startWatchDelay = 500 * time.Millisecond

func (n *Node) newSandbox(id, token string) *Sandbox {
	dial := func(ctx context.Context) (net.Conn, error) { return n.rt(id).DialAgent(ctx, id) }
	timeout := agentDialTimeout
	if b, ok := n.rt(id).(agentDialBound); ok {
		timeout = b.AgentDialTimeout()
	}
	return &Sandbox{
		ID:       id,
		Agent:    newAgentConn(dial, token, timeout),
		sessions: map[string]*Session{},
		node:     n,
	}
}

// startTemplateCommand runs the template's start command as a session and
// waits for its ready check.
func (sb *Sandbox) startTemplateCommand(ctx context.Context, t TemplateSpec) error {
	if t.Start != "" {
		if _, err := sb.StartSession(ctx, SessionSpec{Cmd: []string{"/bin/sh", "-c", t.Start}, Tag: "start"}); err != nil {
			return fmt.Errorf("template start command: %w", err)
		}
	}
	if t.Ready == "" {
		return nil
	}
	readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		// One check may take as long as the whole wait: E2B's
		// waitForTimeout is a ready check that sleeps (20 s for a
		// Dockerfile's CMD).
		res, err := sb.Exec(readyCtx, ExecSpec{Cmd: []string{"/bin/sh", "-c", t.Ready}, Timeout: readyTimeout})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		select {
		case <-readyCtx.Done():
			return fmt.Errorf("ready check %q did not pass within %s", t.Ready, readyTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Adopt takes over a sandbox whose runtime survived a restart of the node
// (a recovery step, nodeapi.RecoverySteps). It reports false if the
// sandbox is not running any more, and true, changing nothing, for one
// this process already runs.
func (n *Node) Adopt(ctx context.Context, id, accessToken string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	st, err := n.rt(id).State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused {
		return false, nil
	}
	if _, err := n.lookup(id); err == nil {
		// This process runs it already: a control plane that restarted
		// reconciles a node that did not. Adopting it again would drop
		// the sessions it holds and watch its runtime twice.
		return true, nil
	}
	sb := n.newSandbox(id, accessToken)
	// A runtime started before the agent store mounts the old single
	// agent directory: the adopted agent of older nodes.
	digest := n.agents.recorded(id)
	if digest == "" {
		digest = n.legacyDigest
	}
	if digest == "" {
		digest = n.agentDigest
	}
	sb.setAgent(digest)
	if st.Status == runtime.StatusRunning {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := sb.Agent.waitHealthy(hctx); err != nil {
			return false, nil
		}
	}
	if l, err := n.rt(id).Limits(id); err == nil {
		n.commit(id, l)
	} else {
		n.log.Warn("adopted sandbox's limits unknown; not counted as committed", "sandbox", id, "err", err)
	}
	n.register(sb)
	n.track(ctx, sb)
	if st.Status == runtime.StatusRunning {
		sb.adoptProcesses(ctx)
	}
	return true, nil
}

// Destroy stops a sandbox and releases everything it held: processes,
// network slot, root volume, runtime state. Destroying a sandbox that is
// already gone is not an error.
func (n *Node) Destroy(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer n.lifecycle.lock(id)()
	return n.release(ctx, id)
}

func (n *Node) release(ctx context.Context, id string) error {
	n.untrack(id)
	n.metrics.forget(id)
	n.uncommit(id)
	if sb := n.unregister(id); sb != nil {
		sb.discardSessions("sandbox stopped")
		sb.closePortConns()
		sb.Agent.Reset()
	}
	var errs []error
	if err := n.rt(id).Destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := n.destroySlot(n.cfg.Namespaces.Slot(id)); err != nil {
		errs = append(errs, err)
	}
	for _, v := range []string{volumeName(id), previousVolumeName(id), stagedVolumeName(id)} {
		if err := n.cfg.Volumes.Delete(v); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release %s: %w", id, err)
	}
	n.agents.forget(id)
	n.forgetRuntime(id)
	n.collectAgents()
	return nil
}

// Sweep removes runtime sandboxes, network slots and volumes that belong to
// no sandbox in keep: leftovers of a crash between steps. Candidates come
// from this installation's runtime state, volumes and network namespace
// directory. Image directories that hold no image any more go too (images
// themselves outlive their sandboxes: the control plane deletes them).
//
// Slots in network.LegacyDir, where older versions kept them, are another
// matter: that directory is host-wide and may hold other installations'.
// Of those, only the slots of sandboxes in keep whose runtime is gone are
// removed (the slot of a runtime that survived an upgrade is still in use).
func (n *Node) Sweep(ctx context.Context, keepIDs []string) error {
	kept := make(map[string]bool, len(keepIDs))
	for _, id := range keepIDs {
		kept[id] = true
	}
	keep := func(id string) bool { return kept[id] }
	ids := map[string]bool{}
	running, err := n.listAll(ctx)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	alive := map[string]bool{}
	for _, id := range running {
		ids[id] = true
		alive[id] = true
	}
	// A restore in place interrupted by a crash of its sandbox's owner
	// leaves volumes under these names too.
	for _, dir := range []string{"sandboxes", "restoring", "previous"} {
		vols, err := n.cfg.Volumes.List(dir)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		for _, v := range vols {
			ids[path.Base(v)] = true
		}
	}
	slots, err := n.cfg.Namespaces.Names()
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, id := range slots {
		ids[id] = true
	}
	for _, id := range n.agents.recordedIDs() {
		ids[id] = true
	}
	for _, id := range n.recordedRuntimeIDs() {
		ids[id] = true
	}
	var errs []error
	for id := range ids {
		if keep(id) || n.buildRunning(id) {
			continue
		}
		n.log.Info("removing orphaned sandbox resources", "sandbox", id)
		if err := n.release(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	legacy, err := network.LegacyNames()
	if err != nil {
		errs = append(errs, fmt.Errorf("sweep: %w", err))
	}
	for _, id := range legacy {
		// Not ours to keep: another installation's, or released above
		// (release removes a slot's legacy files too). A runtime alive
		// still uses its slot.
		if !keep(id) || alive[id] && n.runtimeAlive(ctx, id) {
			continue
		}
		n.log.Info("removing network slot left by an older version", "sandbox", id)
		if err := n.destroySlot(n.cfg.Namespaces.Slot(id)); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
		}
	}
	if err := n.pruneImageDirs(); err != nil {
		errs = append(errs, fmt.Errorf("sweep: %w", err))
	}
	return errors.Join(errs...)
}

// runtimeAlive reports whether the sandbox's runtime is running or paused.
func (n *Node) runtimeAlive(ctx context.Context, id string) bool {
	st, err := n.rt(id).State(ctx, id)
	return err == nil && (st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused)
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
