package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/space-platform/space/pkg/apiv1"
)

var keyCommands = []command{
	{"create", "create an API key and print it", runKeysCreate},
	{"ls", "list API keys", runKeysList},
	{"revoke", "revoke API keys", runKeysRevoke},
}

func runKeys(ctx context.Context, args []string) error {
	return dispatch(ctx, "space keys", keyCommands, args)
}

func runKeysCreate(ctx context.Context, args []string) error {
	fs := newFlagSet("space keys create NAME [--project P] [--admin]", `
Create an API key and print it on stdout. The server shows the key only
once: store it now. The key belongs to project P (default: "default") and
sees only that project's sandboxes, snapshots, templates and secrets, plus
the built-in templates; --admin makes a key that sees every project. Needs
the admin key.`)
	name := fs.String("name", "", "what the key is for, shown by keys ls (or give it as NAME)")
	proj := fs.String("project", "", "project the key belongs to (default: default)")
	admin := fs.Bool("admin", false, "make an admin key (sees and manages every project)")
	rest, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 1:
		return fs.usageErrorf("keys create takes one NAME, got %d", len(rest))
	case len(rest) == 1 && *name != "" && *name != rest[0]:
		return fs.usageErrorf("keys create: give the name once (NAME or --name)")
	case len(rest) == 1:
		*name = rest[0]
	}
	if *name == "" {
		return fs.usageErrorf("keys create needs a NAME")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	key, err := c.CreateKey(ctx, apiv1.CreateKeyRequest{Name: *name, Project: *proj, Admin: *admin})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "created key %s (%s) in project %s; it is shown only once\n", key.ID, key.Name, key.Project)
	fmt.Fprintln(stdout, key.Key)
	return nil
}

func runKeysList(ctx context.Context, args []string) error {
	fs := newFlagSet("space keys ls [--project P]", "List API keys (without their secrets). Needs the admin key.")
	proj := fs.String("project", "", "list only the keys of this project")
	if err := parseNoArgs(fs, args, "keys ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	keys, err := c.ListKeys(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "ID", "NAME", "PROJECT", "PREFIX", "ADMIN", "CREATED")
	for _, k := range keys {
		if *proj == "" || k.Project == *proj {
			t.row(k.ID, k.Name, k.Project, k.Prefix, strconv.FormatBool(k.Admin), ago(k.CreatedAt))
		}
	}
	return t.flush()
}

func runKeysRevoke(ctx context.Context, args []string) error {
	fs := newFlagSet("space keys revoke ID...", "Revoke API keys by id. Needs the admin key.")
	ids, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fs.usageErrorf("keys revoke needs at least one key ID")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return forEach(ids, func(id string) error { return c.RevokeKey(ctx, id) })
}

// forEach applies action to every id, printing the ids that succeeded and a
// sentence for each failure, so that one bad id does not stop the rest.
func forEach(ids []string, action func(id string) error) error {
	failed := false
	for _, id := range ids {
		if err := action(id); err != nil {
			fmt.Fprintf(stderr, "space: %s\n", describeError(err))
			failed = true
			continue
		}
		fmt.Fprintln(stdout, id)
	}
	if failed {
		return &exitStatus{code: 1}
	}
	return nil
}
