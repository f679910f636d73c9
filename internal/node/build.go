package node

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/sandboxid"
)

// buildIDPrefix starts the ID of every build sandbox, so that logs and
// the runtime's list tell them from users' sandboxes.
const buildIDPrefix = "build"

// BuildSandbox is a sandbox a template build runs its steps in. Its root
// filesystem is the build's work volume, mounted read-write; it is not
// registered with the node's sandboxes, so no API route can reach it.
type BuildSandbox struct {
	ID string
	sb *Sandbox
	n  *Node
}

// StartBuild boots a build sandbox on an existing volume (the template's
// work volume) under the runtime, limits and egress policy given: the
// same runtime, network slot and gateway as any sandbox. Its agent
// runs as root with / as the working directory.
func (n *Node) StartBuild(ctx context.Context, volume string, limits runtime.Limits, policy network.Policy) (_ *BuildSandbox, err error) {
	if !n.cfg.Volumes.Exists(volume) {
		return nil, fmt.Errorf("build sandbox: volume %s is missing", volume)
	}
	id := buildIDPrefix + sandboxid.New()[len(buildIDPrefix):]
	n.buildStarted(id)
	// Its limits are the node's as any sandbox's are, so that Info (and
	// the placements that read it) counts the build; stopBuild releases
	// them.
	n.commit(id, limits)
	defer func() {
		if err != nil {
			n.stopBuild(context.WithoutCancel(ctx), id)
		}
	}()
	// Recipes' steps run under gVisor, whichever backends the template is
	// built for.
	sb, err := n.startAgent(ctx, id, runtime.GVisor, volume, 0, limits, policy, nil, agentInit{
		AccessToken: randomHex(32), DefaultUser: "root", DefaultWorkdir: "/",
		Hostname: "space-build",
	})
	if err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	return &BuildSandbox{ID: id, sb: sb, n: n}, nil
}

// Run runs script with /bin/sh -c as root in / and writes its stdout and
// stderr, in the order they arrive, to out. A non-zero exit is an error
// saying so.
func (b *BuildSandbox) Run(ctx context.Context, script string, env map[string]string, out io.Writer) error {
	cwd := "/"
	req := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, Envs: env, Cwd: &cwd},
	})
	setUser(req.Header(), "root")
	stream, err := b.sb.Agent.Process.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("start step: %w", err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			_, _ = out.Write(d.GetStdout())
			_, _ = out.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			switch {
			case e.GetExitCode() != 0:
				return fmt.Errorf("exit status %d", e.GetExitCode())
			case !e.GetExited() && e.GetError() != "":
				return fmt.Errorf("step ended: %s", e.GetError())
			}
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("lost the build sandbox's agent during the step: %w", err)
	}
	return errors.New("the step's output ended without an exit status")
}

// WriteFile writes a file as root in the build sandbox, creating parents.
func (b *BuildSandbox) WriteFile(ctx context.Context, path string, r io.Reader) error {
	return b.sb.WriteFile(ctx, path, "root", r)
}

// Stop kills the build sandbox and releases its runtime and network slot;
// the volume stays (it is the build's).
func (b *BuildSandbox) Stop(ctx context.Context) error {
	b.sb.Agent.Reset()
	return b.n.stopBuild(ctx, b.ID)
}

func (n *Node) stopBuild(ctx context.Context, id string) error {
	defer n.buildStopped(id)
	defer n.uncommit(id)
	var errs []error
	if err := n.rt(id).Destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := n.destroySlot(n.cfg.Namespaces.Slot(id)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop build sandbox %s: %w", id, err)
	}
	// The record of which agent the build sandbox ran: its image keeps
	// the digest itself.
	n.agents.forget(id)
	n.forgetRuntime(id)
	return nil
}

// buildStarted and buildStopped track the build sandboxes running, which
// Sweep must leave alone: they belong to no sandbox record.
func (n *Node) buildStarted(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.builds == nil {
		n.builds = map[string]bool{}
	}
	n.builds[id] = true
}

func (n *Node) buildStopped(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.builds, id)
}

func (n *Node) buildRunning(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.builds[id]
}
