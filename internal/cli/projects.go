package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/space-platform/space/pkg/apiv1"
)

var projectCommands = []command{
	{"ls", "list projects with their quotas and usage", runProjectsList},
	{"set", "set a project's quotas", runProjectsSet},
}

func runProjects(ctx context.Context, args []string) error {
	return dispatch(ctx, "space projects", projectCommands, args)
}

// limit shows a quota figure; 0 is unlimited.
func limit(n float64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(n, 'f', -1, 64)
}

func runProjectsList(ctx context.Context, args []string) error {
	fs := newFlagSet("space projects ls", `
List projects (tenants) with what they hold and their quotas
(used/limit; "-" is unlimited). Needs the admin key.`)
	if err := parseNoArgs(fs, args, "projects ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	list, err := c.ListProjects(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "PROJECT", "KEYS", "SANDBOXES", "MEMORY MB", "SNAPSHOTS", "CREATES/S", "TEMPLATE DISK MB")
	for _, p := range list {
		q, u := p.Quota, p.Usage
		t.row(p.Name, strconv.Itoa(u.Keys),
			fmt.Sprintf("%d/%s", u.Sandboxes, limit(float64(q.MaxSandboxes))),
			fmt.Sprintf("%d/%s", u.MemoryMB, limit(float64(q.MaxMemoryMB))),
			fmt.Sprintf("%d/%s", u.Snapshots, limit(float64(q.MaxSnapshots))),
			limit(q.CreatesPerSecond),
			fmt.Sprintf("%d/%s", u.TemplateDiskMB, limit(float64(q.MaxTemplateDiskMB))))
	}
	return t.flush()
}

// ptr is a given optionalInt as a pointer, nil when it was not given.
func (o *optionalInt) ptr() *int {
	if !o.set {
		return nil
	}
	v := o.value
	return &v
}

// optionalFloat is a float flag that knows whether it was given.
type optionalFloat struct{ v *float64 }

func (o *optionalFloat) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatFloat(*o.v, 'f', -1, 64)
}

func (o *optionalFloat) Set(s string) error {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want 0 (unlimited) or a positive number, got %q", s)
	}
	o.v = &n
	return nil
}

func runProjectsSet(ctx context.Context, args []string) error {
	fs := newFlagSet("space projects set NAME [--max-sandboxes N] [--max-memory-mb N] [--max-snapshots N] [--creates-per-second R] [--max-volume-mb N] [--max-template-disk-mb N]", `
Set the quotas of project NAME. The settings replace the project's earlier
ones: a flag left out takes the server's default (--project-* flags of
space serve); 0 is unlimited. Needs the admin key.`)
	var sandboxes, memory, snapshots optionalInt
	var rate optionalFloat
	fs.Var(&sandboxes, "max-sandboxes", "sandboxes the project may have at once (stopped and failed ones do not count)")
	fs.Var(&memory, "max-memory-mb", "sum of memory_mb of the project's sandboxes")
	fs.Var(&snapshots, "max-snapshots", "snapshots the project may keep")
	fs.Var(&rate, "creates-per-second", "sandbox creates a second (branches count one each)")
	var volumeMB optionalInt
	fs.Var(&volumeMB, "max-volume-mb", "sum of size_mb of the project's volumes")
	var templateDiskMB optionalInt
	fs.Var(&templateDiskMB, "max-template-disk-mb", "sum of the sizes of the project's built templates; a build past it fails")
	rest, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	for name, o := range map[string]*optionalInt{"max-sandboxes": &sandboxes, "max-memory-mb": &memory, "max-snapshots": &snapshots, "max-volume-mb": &volumeMB, "max-template-disk-mb": &templateDiskMB} {
		if o.set && o.value < 0 {
			return fs.usageErrorf("--%s must be 0 (unlimited) or positive", name)
		}
	}
	if len(rest) != 1 {
		return fs.usageErrorf("projects set needs exactly one project NAME")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	p, err := c.SetProjectQuota(ctx, rest[0], apiv1.QuotaSettings{
		MaxSandboxes: sandboxes.ptr(), MaxMemoryMB: memory.ptr(), MaxSnapshots: snapshots.ptr(), CreatesPerSecond: rate.v, MaxVolumeMB: volumeMB.ptr(),
		MaxTemplateDiskMB: templateDiskMB.ptr(),
	})
	if err != nil {
		return err
	}
	q := p.Quota
	fmt.Fprintf(stdout, "project %s: max sandboxes %s, max memory MB %s, max snapshots %s, creates/s %s, max template disk MB %s\n", p.Name,
		limit(float64(q.MaxSandboxes)), limit(float64(q.MaxMemoryMB)), limit(float64(q.MaxSnapshots)), limit(q.CreatesPerSecond), limit(float64(q.MaxTemplateDiskMB)))
	return nil
}
