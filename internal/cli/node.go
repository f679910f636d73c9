package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// nodeCommands are the subcommands of "space node": run starts the node
// service (also "space node --flags ..."), the others manage the cluster's
// nodes through the API.
var nodeCommands = []command{
	{"run", "run the node service of a cluster (same as space node --flags)", runNodeService},
	{"ls", "list the cluster's nodes (admin key only)", runNodeList},
	{"cordon", "stop placing new sandboxes on nodes (admin key only)", runNodeCordon},
	{"uncordon", "make nodes take new sandboxes again (admin key only)", runNodeUncordon},
	{"drain", "move every sandbox off nodes (admin key only)", runNodeDrain},
	{"remove", "remove nodes from the cluster (admin key only)", runNodeRemove},
	{"wait-empty", "wait until no node runs a sandbox (admin key only)", runNodeWaitEmpty},
}

func runNodeWaitEmpty(ctx context.Context, args []string) error {
	fs := newFlagSet("space node wait-empty [--timeout D]", `
Wait until every node of the cluster reports no sandbox at all, pooled
ones included: after "space sandbox rm --all" and "space template pool
--all 0", before the nodes are taken away. Needs the admin key.`)
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait")
	if err := parseNoArgs(fs, args, "node wait-empty"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return err
		}
		busy := []string{}
		for _, n := range nodes {
			if n.Sandboxes > 0 && n.State != apiv1.NodeUnreachable {
				busy = append(busy, fmt.Sprintf("%s (%d)", n.ID, n.Sandboxes))
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes still run sandboxes after %s: %s", *timeout, strings.Join(busy, ", "))
		}
		fmt.Fprintf(stderr, "space: waiting for %s\n", strings.Join(busy, ", "))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// runNode dispatches "space node": a first argument that is a flag starts
// the node service, as "space node --data-dir D --control-plane URL" reads
// best for the command an init system runs.
func runNode(ctx context.Context, args []string) error {
	if len(args) > 0 && strings.HasPrefix(args[0], "-") && !isHelpFlag(args[0]) {
		return runNodeService(ctx, args)
	}
	return dispatch(ctx, "space node", nodeCommands, args)
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func runNodeList(ctx context.Context, args []string) error {
	fs := newFlagSet("space node ls", `
List the cluster's nodes: state, sandboxes, vCPUs and memory committed to
sandboxes of what the node has, free memory and disk, and the time of the
last heartbeat. A node that missed its heartbeats is unreachable; REASON
says how long. Needs the admin key.`)
	if err := parseNoArgs(fs, args, "node ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	nodes, err := c.ListNodes(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "ID", "STATE", "SANDBOXES", "VCPUS", "MEMORY MB", "FREE MB", "DISK FREE MB", "HEARTBEAT", "ADDRESS", "REASON")
	for _, n := range nodes {
		t.row(n.ID, n.State, strconv.Itoa(n.Sandboxes),
			fmt.Sprintf("%d/%d", n.VCPUsCommitted, n.VCPUs),
			fmt.Sprintf("%d/%d", n.MemoryCommittedMB, n.MemoryMB),
			strconv.Itoa(n.MemoryFreeMB), strconv.Itoa(n.DiskFreeMB),
			ago(n.LastHeartbeat), orDash(n.Address), orDash(n.Reason))
	}
	return t.flush()
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nodeIDs parses the node ids of cordon, uncordon, drain and remove.
func nodeIDs(fs *flagSet, args []string, verb string) ([]string, error) {
	ids, err := fs.parse(args, true)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fs.usageErrorf("node %s needs at least one node ID", verb)
	}
	return ids, nil
}

// nodeTransition is a command that applies call to every node id given.
func nodeTransition(verb, description string, call func(c *client.Client, ctx context.Context, id string) (*apiv1.Node, error)) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fs := newFlagSet("space node "+verb+" ID...", description)
		ids, err := nodeIDs(fs, args, verb)
		if err != nil {
			return err
		}
		c, err := connect()
		if err != nil {
			return err
		}
		return forEach(ids, func(id string) error { _, err := call(c, ctx, id); return err })
	}
}

var (
	runNodeCordon = nodeTransition("cordon", `
Stop placing new sandboxes on nodes. Their sandboxes keep running; space
node uncordon undoes it. Needs the admin key.`, (*client.Client).CordonNode)
	runNodeUncordon = nodeTransition("uncordon", `
Make cordoned or draining nodes take new sandboxes again. Sandboxes a drain
already moved stay where they are. Needs the admin key.`, (*client.Client).UncordonNode)
	runNodeDrain = nodeTransition("drain", `
Drain nodes: they take no new sandboxes and their sandboxes move to other
nodes, running ones suspended, shipped and resumed there. Returns once the
nodes are draining; space node ls shows their sandboxes leave. Needs the
admin key.`, (*client.Client).DrainNode)
)

func runNodeRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space node remove [--force] ID...", `
Remove nodes from the cluster. A node that runs no sandboxes, or a lost
one, is deleted; stop its process first, or it registers again. A node with
sandboxes is refused unless --force, which marks it lost: its sandboxes are
written off (they report node_state "lost"), and removing it again deletes
it. Needs the admin key.`)
	force := fs.Bool("force", false, "mark a node that still has sandboxes lost instead of refusing")
	ids, err := nodeIDs(fs, args, "remove")
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return forEach(ids, func(id string) error {
		n, err := c.RemoveNode(ctx, id, *force)
		if err == nil && n != nil {
			fmt.Fprintf(stderr, "space: node %s is lost: %s\n", n.ID, n.Reason)
		}
		return err
	})
}
