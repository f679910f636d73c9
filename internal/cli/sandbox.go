package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

var sandboxCommands = []command{
	{"create", "create a sandbox and print its id", runSandboxCreate},
	{"ls", "list sandboxes", runSandboxList},
	{"get", "print a sandbox as JSON", runSandboxGet},
	{"rm", "remove sandboxes", runSandboxRemove},
	{"timeout", "set how long a sandbox has left to live", runSandboxTimeout},
}

func runSandbox(ctx context.Context, args []string) error {
	return dispatch(ctx, "space sandbox", sandboxCommands, args)
}

func runSandboxCreate(ctx context.Context, args []string) error {
	fs := newFlagSet("space sandbox create [flags]", `
Create a sandbox and print its id. Without --wait the sandbox may still be
starting when the command returns.`)
	req := apiv1.CreateSandboxRequest{}
	env, metadata := keyValues{}, keyValues{}
	fs.StringVar(&req.Template, "template", "base", "template to start from")
	fs.StringVar(&req.Runtime, "runtime", "", "backend to run on, gvisor or microvm: one the template was built for (default: the template's)")
	fs.IntVar(&req.VCPUs, "vcpus", 0, "virtual CPUs (0: server default)")
	fs.IntVar(&req.MemoryMB, "memory-mb", 0, "memory in MiB (0: server default)")
	fs.IntVar(&req.DiskMB, "disk-mb", 0, "disk size in MiB (0: server default)")
	fs.Var(env, "env", "environment variable `KEY=VALUE` (repeatable)")
	fs.Var(metadata, "metadata", "metadata `KEY=VALUE` (repeatable)")
	fs.IntVar(&req.TimeoutS, "timeout-s", 0, "lifetime in seconds (0: server default)")
	wait := fs.Bool("wait", false, "wait until the sandbox is running")
	waitTimeout := fs.Duration("wait-timeout", 2*time.Minute, "how long --wait waits")
	var network networkFlags
	network.register(fs)
	privatePorts := fs.Bool("private-ports", false, "exposed ports need the sandbox's traffic token")
	var credentials credentialFlags
	credentials.register(fs)
	var volumes volumeFlags
	fs.Var(&volumes, "volume", "mount a persistent volume, `NAME:/path[:ro]` (repeatable)")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return fs.usageErrorf("sandbox create takes no arguments, got %q", positional[0])
	}
	req.Env, req.Metadata = env.orNil(), metadata.orNil()
	req.Network = network.policy()
	if *privatePorts {
		if req.Network == nil {
			req.Network = &apiv1.NetworkPolicy{}
		}
		public := false
		req.Network.AllowPublicTraffic = &public
	}
	req.Credentials = credentials.rules
	req.VolumeMounts = volumes.mounts
	c, err := connect()
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	if *wait {
		if _, err := c.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, *waitTimeout); err != nil {
			if client.IsTimeout(err) {
				return fmt.Errorf("sandbox %s is not running after %s", sb.ID, *waitTimeout)
			}
			return fmt.Errorf("sandbox %s did not start: %w", sb.ID, err)
		}
	}
	fmt.Fprintln(stdout, sb.ID)
	return nil
}

func runSandboxList(ctx context.Context, args []string) error {
	fs := newFlagSet("space sandbox ls [flags]", "List sandboxes as a table.")
	metadata := keyValues{}
	state := fs.String("state", "", "only sandboxes in this `state` (starting, running, stopped, ...)")
	fs.Var(metadata, "metadata", "only sandboxes with metadata `KEY=VALUE` (repeatable)")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return fs.usageErrorf("sandbox ls takes no arguments, got %q", positional[0])
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sandboxes, err := c.ListSandboxes(ctx, client.ListOptions{State: *state, Metadata: metadata})
	if err != nil {
		return err
	}
	t := newTable(stdout, "ID", "TEMPLATE", "STATE", "VCPUS", "MEMORY", "CREATED", "EXPIRES", "METADATA")
	for _, sb := range sandboxes {
		t.row(sb.ID, sb.Template, sb.State, strconv.Itoa(sb.VCPUs), strconv.Itoa(sb.MemoryMB)+" MiB",
			ago(sb.CreatedAt), until(sb.ExpiresAt), formatMap(sb.Metadata))
	}
	return t.flush()
}

func runSandboxGet(ctx context.Context, args []string) error {
	fs := newFlagSet("space sandbox get ID", "Print a sandbox as JSON.")
	id, err := parseOneID(fs, args, "sandbox get")
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	return printJSON(sb)
}

func runSandboxRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space sandbox rm ID... | --all", `
Remove sandboxes, releasing everything they hold. --all removes every
sandbox the key sees that is not stopped or failed already (with the admin
key: those of every project), as an uninstall does.`)
	all := fs.Bool("all", false, "remove every sandbox the key sees")
	ids, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if *all && len(ids) > 0 {
		return fs.usageErrorf("sandbox rm takes IDs or --all, not both")
	}
	if !*all && len(ids) == 0 {
		return fs.usageErrorf("sandbox rm needs at least one sandbox ID (or --all)")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	if *all {
		list, err := c.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			return err
		}
		for _, sb := range list {
			if sb.State != apiv1.StateStopped && sb.State != apiv1.StateFailed {
				ids = append(ids, sb.ID)
			}
		}
	}
	return forEach(ids, func(id string) error {
		if err := c.DeleteSandbox(ctx, id); err != nil && !(*all && client.IsNotFound(err)) {
			return err
		}
		return nil
	})
}

func runSandboxTimeout(ctx context.Context, args []string) error {
	fs := newFlagSet("space sandbox timeout ID DURATION", `
Set the sandbox's remaining lifetime to DURATION from now (for example 10m
or 600s; a bare number is seconds).`)
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		return fs.usageErrorf("sandbox timeout needs a sandbox ID and a duration")
	}
	timeout, err := parseSeconds(positional[1])
	if err != nil {
		return fs.usageErrorf("%s", err)
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sb, err := c.SetTimeout(ctx, positional[0], timeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s expires %s\n", sb.ID, until(sb.ExpiresAt))
	return nil
}

// parseSeconds accepts a Go duration ("90s", "10m") or a number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 600 or 10m", s)
	}
	return d, nil
}

// parseOneID parses a command that takes exactly one sandbox ID.
func parseOneID(fs *flagSet, args []string, name string) (string, error) {
	return parseOneName(fs, args, name, "sandbox ID")
}
