package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/gateway"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/runtime/gvisor"
	"github.com/space-platform/space/internal/runtime/microvm"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/template"
)

// nodeSideConfig is what the node side of a process is told: `space
// serve` fills it from its Config, `space node` from its NodeConfig.
type nodeSideConfig struct {
	DataDir, RunscPath, AgentPath, Platform string
	// Runtimes are the backends to offer; Accel is what the microVM
	// backend is to accelerate with (checkRuntimes).
	Runtimes []string
	Accel    string
	// SharedNetns keeps the network namespace directory a shared mount
	// (network.OpenSharedNamespaces): for a node in a container whose
	// successor must reach the sandboxes it leaves running.
	SharedNetns      bool
	VolumeImageBytes int64
	// ID names the node (its Info's id).
	ID      string
	Network network.EgressConfig
	// Limits are every sandbox's network limits, enforced by the node.
	Limits      network.Limits
	DNSUpstream string
	// Interceptor terminates TLS for hosts with credential rules; nil:
	// no credential injection.
	Interceptor gateway.Interceptor
	// TrustedCA is installed into every template the node builds (and
	// hashed into its id); nil: none.
	TrustedCA          []byte
	SessionOutputLimit int64
	// SessionSpillLimit bounds each session's output spilled to disk
	// (node.Config.SessionSpillLimit).
	SessionSpillLimit int64
	// BuildDefaults are the defaults of ordinary sandboxes, which size
	// the sandboxes templates are built in (buildShape).
	BuildDefaults controlplane.Defaults
	// RegistryPrivate lets recipes pull images from private addresses.
	RegistryPrivate bool
	// BuildCache is template.Config.BuildCache.
	BuildCache string
	Logger     *slog.Logger
	say        func(string, ...any)
}

// nodeSide is the node of a process: its volumes, network slots, egress
// gateway, the node service itself and the templates built on it.
type nodeSide struct {
	pool      *storage.Pool
	slots     *network.Namespaces
	gateway   *gateway.Gateway
	node      *node.Node
	templates *template.Manager
	// runscRoot is runsc's state directory, where it keeps a mount of
	// its own (null-netns).
	runscRoot string
	// microvm is the microVM backend, nil unless --runtimes has it.
	microvm *microvm.Runtime
}

// openNodeSide brings up the node side of a process. It starts no
// goroutine; run starts the node's loops. On failure what it opened is
// closed.
func openNodeSide(ctx context.Context, cfg nodeSideConfig) (_ *nodeSide, err error) {
	say := cfg.say
	if err := checkRuntimes(cfg.Runtimes, cfg.Accel); err != nil {
		return nil, err
	}
	var qemu string
	var kernel microvm.Kernel
	if slices.Contains(cfg.Runtimes, runtime.MicroVM) {
		// Before anything is opened: a host without them fails at once.
		if qemu, kernel, err = microVMTools(); err != nil {
			return nil, err
		}
	}
	ns := &nodeSide{}
	defer func() {
		if err != nil {
			ns.close()
		}
	}()
	if ns.pool, err = storage.Open(ctx, storage.Options{
		Root: filepath.Join(cfg.DataDir, "volumes"), ImageSizeBytes: cfg.VolumeImageBytes,
		Logf: func(f string, a ...any) { say(f, a...) },
	}); err != nil {
		return nil, err
	}
	say("volumes: %s (%s)", ns.pool.Root(), ns.pool.Kind())

	runscPath, err := findTool(cfg.RunscPath, "SPACE_RUNSC", "runsc")
	if err != nil {
		return nil, err
	}
	agentPath, err := findTool(cfg.AgentPath, "SPACE_AGENT", "space-agent")
	if err != nil {
		return nil, err
	}
	// The slots' network namespaces live in a directory of this
	// installation's, out of reach of `ip netns` (see network.Namespaces).
	openSlots := network.OpenNamespaces
	if cfg.SharedNetns {
		openSlots = network.OpenSharedNamespaces
	}
	if ns.slots, err = openSlots(filepath.Join(cfg.DataDir, "netns")); err != nil {
		return nil, err
	}
	ns.runscRoot = filepath.Join(cfg.DataDir, "runtime", "runsc")
	rt, err := gvisor.New(gvisor.Config{RunscPath: runscPath, StateDir: filepath.Join(cfg.DataDir, "runtime"), Platform: cfg.Platform, Namespaces: ns.slots})
	if err != nil {
		return nil, err
	}
	backends := map[string]runtime.Runtime{runtime.GVisor: rt}
	// gVisor boots the rootfs volume as it is: no artifact to make.
	builders := map[string]runtime.ImageBuilder{runtime.GVisor: nil}
	if qemu != "" {
		vm, err := microvm.New(ctx, microvm.Config{
			QEMU: qemu, Kernel: kernel, StateDir: filepath.Join(cfg.DataDir, "microvm"), Accel: cfg.Accel, Logger: cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		ns.microvm = vm
		backends[runtime.MicroVM], builders[runtime.MicroVM] = vm, vm
		say("microvm runtime: %s, guest kernel %s", vm.Isolation(), kernel.Version)
	}
	var egress *network.Egress
	cfg.Network.Limits = cfg.Limits
	if cfg.Network.UplinkPool.IsValid() {
		if egress, err = network.NewEgress(cfg.Network); err != nil {
			return nil, err
		}
		upstream := cfg.DNSUpstream
		if upstream == "" {
			if upstream, err = gateway.DefaultUpstream(); err != nil {
				return nil, err
			}
		}
		gcfg := gateway.Config{
			Egress: egress, Upstream: upstream, Logger: cfg.Logger,
			// Denials are reported once sandboxes run, after ns.node is
			// set; they reach the control plane as the node's events.
			OnDenied: func(id, message string) { ns.node.NetworkDenied(id, message) },
		}
		if cfg.Interceptor != nil {
			gcfg.Interceptor = cfg.Interceptor
		}
		if ns.gateway, err = gateway.New(gcfg); err != nil {
			return nil, err
		}
	}
	if ns.node, err = node.New(node.Config{
		Namespaces: ns.slots, Egress: egress, Gateway: ns.gateway,
		Runtimes: backends, Volumes: ns.pool, AgentBinary: agentPath, StateDir: filepath.Join(cfg.DataDir, "node"),
		SessionOutputLimit: cfg.SessionOutputLimit, Logger: cfg.Logger,
		ImagesDir: filepath.Join(cfg.DataDir, "images"),
		// Sessions' output past their memory tail spills into the
		// volumes' pool (node.Config.SessionSpillDir's default), off
		// the disk that holds the state.
		SessionSpillLimit: cfg.SessionSpillLimit,
		ID:                cfg.ID,
		Capacity:          nodeCapacity(ns.pool.Root()),
	}); err != nil {
		return nil, err
	}
	buildLimits, buildDisk := buildShape(cfg.BuildDefaults)
	if ns.templates, err = template.NewManager(template.Config{
		DataDir: cfg.DataDir, Volumes: ns.pool, Logf: func(f string, a ...any) { cfg.Logger.Info(fmt.Sprintf(f, a...)) },
		TrustedCA:      cfg.TrustedCA,
		BuildDiskBytes: buildDisk,
		Registry:       template.RegistryConfig{AllowPrivate: cfg.RegistryPrivate},
		BuildCache:     cfg.BuildCache,
		Sandboxes:      buildSandboxes{node: ns.node, limits: buildLimits},
		Runtimes:       builders,
	}); err != nil {
		return nil, err
	}
	return ns, nil
}

// run starts the node's loops until ctx ends: the volumes' quota watch
// and the node's own (its event stream). The control plane, when in the
// same process, follows the events from before this.
func (ns *nodeSide) run(ctx context.Context) {
	go ns.pool.WatchQuotas(ctx, quotaCheckInterval)
	go ns.node.Run(ctx)
}

// buildTemplates builds the built-in templates named that are missing or
// stale, one after the other, each booted once for its pre-booted image;
// ready, when set, is called after each one that became ready.
func (ns *nodeSide) buildTemplates(ctx context.Context, names []string, progress io.Writer, say func(string, ...any), ready func()) {
	for _, name := range names {
		recipe, ok := template.Builtin(name)
		if !ok {
			say("no built-in template named %q", name)
			continue
		}
		// The one under the name counts only if it is what the recipe
		// builds now: one built with another egress CA (a node's data dir
		// from before the cluster's CA, or from another cluster) would
		// have sandboxes trust a CA that is not this installation's.
		if t, err := ns.templates.Get(name); err == nil && t.State == template.StateReady {
			if id, err := ns.templates.PlannedID(name, recipe); err != nil || id == t.ID {
				continue
			}
			say("rebuilding template %s: its recipe, builder or egress CA changed (progress follows)", name)
		} else {
			say("building template %s (first start; progress follows)", name)
		}
		w := &prefixWriter{prefix: "space: [" + name + "] ", out: progress}
		t, err := ns.templates.Build(ctx, name, recipe, template.Source{}, w)
		if err != nil {
			say("template %s failed: %v", name, err)
			continue
		}
		say("template %s ready; booting it once for its snapshot", name)
		// The node makes the template's pre-booted image now, so that its
		// first create is a restore rather than a boot.
		if err := ns.node.PrepareTemplate(ctx, t.Spec()); err != nil {
			say("template %s: no pre-booted image (%v); sandboxes will boot instead", name, err)
		}
		if ready != nil {
			ready()
		}
	}
}

// releaseHost undoes the mounts the node keeps on the host for its
// sandboxes (the volume image, the namespace directory, runsc's
// null-netns) once it runs none: an uninstall leaves no mount behind, and
// a node started again makes them anew in a moment.
func (ns *nodeSide) releaseHost() error {
	var errs []error
	if err := ns.slots.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Unmount(filepath.Join(ns.runscRoot, "null-netns"), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount runsc's null-netns: %w", err))
	}
	if err := ns.pool.Unmount(); err != nil {
		errs = append(errs, fmt.Errorf("unmount the volume image: %w", err))
	}
	return errors.Join(errs...)
}

func (ns *nodeSide) close() {
	if ns.node != nil {
		// Before the backends let go of the guests: their agent channels
		// too must be free for the next process.
		ns.node.CloseAgents()
	}
	if ns.microvm != nil {
		// Lets go of the guests' QMP sockets; the guests run on, for the
		// next process to adopt.
		_ = ns.microvm.Close()
	}
	if ns.gateway != nil {
		ns.gateway.Close()
	}
	if ns.templates != nil {
		_ = ns.templates.Close()
	}
}

// checkRuntimes refuses a --runtimes or --accel the server cannot honour,
// at start: a flag that did nothing would leave sandboxes on a backend
// the operator did not choose.
func checkRuntimes(names []string, accel string) error {
	switch accel {
	case "", "auto", "kvm", "tcg":
	default:
		return fmt.Errorf("--accel %q: want auto, kvm or tcg", accel)
	}
	if len(names) == 0 {
		return errors.New("--runtimes: name at least one runtime (gvisor, microvm)")
	}
	for _, name := range names {
		if err := runtime.CheckName(name); err != nil {
			return fmt.Errorf("--runtimes: %w", err)
		}
	}
	if !slices.Contains(names, runtime.GVisor) {
		return errors.New("--runtimes: gvisor is required: templates are built in gVisor sandboxes whichever runtimes they are for")
	}
	return nil
}

// microVMTools finds what the microvm runtime needs on this host: QEMU
// and the guest kernel scripts/microvm-kernel.sh unpacks (under
// .tools/microvm/current beside the binary or above the working
// directory, or $SPACE_MICROVM_KERNEL). It names everything missing.
func microVMTools() (string, microvm.Kernel, error) {
	var missing []string
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		missing = append(missing, "QEMU (qemu-system-x86_64)")
	}
	kernel, kerr := microvm.FindKernel()
	if kerr != nil {
		missing = append(missing, "the guest kernel (.tools/microvm/current, or $SPACE_MICROVM_KERNEL)")
	}
	if len(missing) > 0 {
		return "", microvm.Kernel{}, fmt.Errorf("--runtimes microvm: this host lacks %s: install with scripts/install-deps.sh, or run with --runtimes gvisor", strings.Join(missing, " and "))
	}
	return qemu, kernel, nil
}
