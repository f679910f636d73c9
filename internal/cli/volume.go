package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

var volumeCommands = []command{
	{"create", "create a persistent volume", runVolumeCreate},
	{"ls", "list volumes", runVolumeList},
	{"rm", "remove volumes and their files", runVolumeRemove},
}

func runVolume(ctx context.Context, args []string) error {
	return dispatch(ctx, "space volume", volumeCommands, args)
}

func runVolumeCreate(ctx context.Context, args []string) error {
	fs := newFlagSet("space volume create NAME [flags]", `
Create a persistent volume and print its id. Sandboxes mount it with
"space sandbox create --volume NAME:/path"; several may at once and see
each other's writes. It outlives them, and snapshots never copy it.

  space volume create data --size-mb 2048`)
	size := fs.Int("size-mb", 0, "most MiB the volume holds (0: server default, 10240)")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return fs.usageErrorf("volume create needs exactly one volume name")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	v, err := c.CreateVolume(ctx, apiv1.CreateVolumeRequest{Name: positional[0], SizeMB: *size})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, v.ID)
	return nil
}

func runVolumeList(ctx context.Context, args []string) error {
	fs := newFlagSet("space volume ls", "List the project's volumes as a table.")
	if err := parseNoArgs(fs, args, "volume ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	list, err := c.ListVolumes(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "ID", "NAME", "SIZE MiB", "NODE", "MOUNTED BY", "CREATED")
	for _, v := range list {
		users := strings.Join(v.MountedBy, ",")
		if users == "" {
			users = "-"
		}
		t.row(v.ID, v.Name, fmt.Sprint(v.SizeMB), v.Node, users, ago(v.CreatedAt))
	}
	return t.flush()
}

func runVolumeRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space volume rm NAME|ID...", "Remove volumes and everything in them. A volume that a sandbox (not stopped) mounts is kept: kill the sandbox first.")
	names, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fs.usageErrorf("volume rm needs at least one volume")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return forEach(names, func(name string) error { return c.DeleteVolume(ctx, name) })
}

// volumeFlags collect --volume NAME:/path[:ro] of sandbox create.
type volumeFlags struct{ mounts []apiv1.VolumeMount }

func (v *volumeFlags) String() string { return "" }

func (v *volumeFlags) Set(s string) error {
	name, rest, ok := strings.Cut(s, ":")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("want NAME:/path or NAME:/path:ro, got %q", s)
	}
	m := apiv1.VolumeMount{Volume: name, Path: rest}
	if p, ok := strings.CutSuffix(rest, ":ro"); ok {
		m.Path, m.ReadOnly = p, true
	}
	v.mounts = append(v.mounts, m)
	return nil
}
