package cli

import (
	"context"
	"fmt"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func runPause(ctx context.Context, args []string) error {
	return runStateChange(ctx, args, "pause", "Pause a sandbox: its processes stop but stay in memory.", (*client.Client).Pause)
}

func runResume(ctx context.Context, args []string) error {
	return runStateChange(ctx, args, "resume", "Resume a paused or suspended sandbox.", (*client.Client).Resume)
}

func runSuspend(ctx context.Context, args []string) error {
	return runStateChange(ctx, args, "suspend", "Suspend a sandbox: its state is saved to disk and its memory released.", (*client.Client).Suspend)
}

// runStateChange runs one of the "space VERB ID" lifecycle commands and
// prints the sandbox's new state.
func runStateChange(ctx context.Context, args []string, verb, description string,
	change func(*client.Client, context.Context, string) (*apiv1.Sandbox, error)) error {
	fs := newFlagSet("space "+verb+" ID", description)
	id, err := parseOneID(fs, args, verb)
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sb, err := change(c, ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", sb.ID, sb.State)
	return nil
}

var snapshotCommands = []command{
	{"create", "snapshot a sandbox", runSnapshotCreate},
	{"ls", "list a sandbox's snapshots", runSnapshotList},
	{"rm", "remove a snapshot", runSnapshotRemove},
}

func runSnapshot(ctx context.Context, args []string) error {
	return dispatch(ctx, "space snapshot", snapshotCommands, args)
}

func runSnapshotCreate(ctx context.Context, args []string) error {
	fs := newFlagSet("space snapshot create ID [NAME]", "Snapshot a sandbox and print the snapshot's name. Without NAME, naming is left to the server.")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) < 1 || len(positional) > 2 {
		return fs.usageErrorf("snapshot create needs a sandbox ID and optionally a snapshot name")
	}
	name := ""
	if len(positional) == 2 {
		name = positional[1]
	}
	c, err := connect()
	if err != nil {
		return err
	}
	snap, err := c.CreateSnapshot(ctx, positional[0], name)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, snap.Name)
	return nil
}

func runSnapshotList(ctx context.Context, args []string) error {
	fs := newFlagSet("space snapshot ls ID", "List a sandbox's snapshots as a table.")
	id, err := parseOneID(fs, args, "snapshot ls")
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	snapshots, err := c.ListSnapshots(ctx, id)
	if err != nil {
		return err
	}
	t := newTable(stdout, "NAME", "ID", "SIZE", "CREATED")
	for _, s := range snapshots {
		t.row(s.Name, s.ID, humanBytes(s.SizeBytes), ago(s.CreatedAt))
	}
	return t.flush()
}

func runSnapshotRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space snapshot rm ID NAME...", "Remove snapshots of a sandbox.")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) < 2 {
		return fs.usageErrorf("snapshot rm needs a sandbox ID and at least one snapshot name")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	id := positional[0]
	return forEach(positional[1:], func(name string) error { return c.DeleteSnapshot(ctx, id, name) })
}

func runRestore(ctx context.Context, args []string) error {
	fs := newFlagSet("space restore ID SNAPSHOT", "Roll a sandbox back to one of its snapshots.")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		return fs.usageErrorf("restore needs a sandbox ID and a snapshot name")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sb, err := c.Restore(ctx, positional[0], positional[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", sb.ID, sb.State)
	return nil
}

func runBranch(ctx context.Context, args []string) error {
	fs := newFlagSet("space branch ID [--count N]", "Start copies of a sandbox from its current state and print their ids.")
	count := fs.Int("count", 1, "how many copies to start")
	id, err := parseOneID(fs, args, "branch")
	if err != nil {
		return err
	}
	if *count < 1 {
		return fs.usageErrorf("--count must be at least 1, got %d", *count)
	}
	c, err := connect()
	if err != nil {
		return err
	}
	sandboxes, err := c.Branch(ctx, id, *count)
	if err != nil {
		return err
	}
	for _, sb := range sandboxes {
		fmt.Fprintln(stdout, sb.ID)
	}
	return nil
}

func runEvents(ctx context.Context, args []string) error {
	fs := newFlagSet("space events ID", "Show a sandbox's lifecycle events, oldest first.")
	id, err := parseOneID(fs, args, "events")
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	events, err := c.Events(ctx, id)
	if err != nil {
		return err
	}
	t := newTable(stdout, "TIME", "TYPE", "FROM", "TO", "MESSAGE")
	for _, ev := range events {
		t.row(ev.Time.Local().Format("2006-01-02 15:04:05"), ev.Type, dash(ev.From), dash(ev.To), ev.Message)
	}
	return t.flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
