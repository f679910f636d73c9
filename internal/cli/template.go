package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

var templateCommands = []command{
	{"build", "build a template from a recipe and follow its log", runTemplateBuild},
	{"ls", "list templates", runTemplateList},
	{"get", "print a template as JSON, with its build log", runTemplateGet},
	{"rm", "remove templates", runTemplateRemove},
	{"pool", "set how many ready sandboxes of templates are kept", runTemplatePool},
}

func runTemplatePool(ctx context.Context, args []string) error {
	fs := newFlagSet("space template pool NAME SIZE | --all SIZE", `
Set the warm pool of a template: how many sandboxes of it are kept started
and idle so that a create only gives one its identity. The pool is of the
template's default runtime (the first of its recipe's runtime list), and
serves creates with the default limits on it. --all sets every
template's pool the key may set (0 empties every pool, as an uninstall does).`)
	all := fs.Bool("all", false, "set the pool of every template")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	want := 2
	if *all {
		want = 1
	}
	if len(positional) != want {
		return fs.usageErrorf("template pool takes a template name and a size (or --all and a size)")
	}
	size, err := strconv.Atoi(positional[len(positional)-1])
	if err != nil || size < 0 {
		return fs.usageErrorf("the pool size must be a whole number, 0 or more, got %q", positional[len(positional)-1])
	}
	c, err := connect()
	if err != nil {
		return err
	}
	names := positional[:len(positional)-1]
	if *all {
		tpls, err := c.ListTemplates(ctx)
		if err != nil {
			return err
		}
		for _, t := range tpls {
			// Only templates with a pool to change: the others refuse
			// nothing but would print noise.
			if t.Pool != nil && (t.Pool.Size != size || size == 0 && t.Pool.Ready > 0) {
				names = append(names, t.Name)
			}
		}
	}
	return forEach(names, func(name string) error {
		_, err := c.SetTemplatePool(ctx, name, size)
		return err
	})
}

func runTemplate(ctx context.Context, args []string) error {
	return dispatch(ctx, "space template", templateCommands, args)
}

func runTemplateBuild(ctx context.Context, args []string) error {
	fs := newFlagSet("space template build -f RECIPE [--name NAME] [--archive IMAGE.tar]", `
Submit a template recipe (YAML) and follow the build log until it is done.
Exits with 1 when the build fails. A recipe that was already built is ready
at once. With --archive, the OCI or docker-save archive is uploaded with the
recipe, whose base must then be "from: upload".`)
	recipePath := fs.String("f", "", "recipe `file` (YAML), - for stdin")
	name := fs.String("name", "", "template `name`, overriding the recipe's")
	archivePath := fs.String("archive", "", "OCI or docker-save image `tar` to upload for a from: upload recipe")
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return fs.usageErrorf("template build takes no arguments, got %q; pass the recipe with -f", positional[0])
	}
	if *recipePath == "" {
		return fs.usageErrorf("template build needs a recipe: -f recipe.yaml")
	}
	recipe, err := readRecipe(*recipePath)
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	started := time.Now()
	req := apiv1.CreateTemplateRequest{Name: *name, Recipe: recipe}
	var tmpl *apiv1.Template
	if *archivePath != "" {
		tmpl, err = uploadTemplate(ctx, c, req, *archivePath)
	} else {
		tmpl, err = c.CreateTemplate(ctx, req)
	}
	if err != nil {
		return err
	}
	if tmpl.State != apiv1.TemplateBuilding {
		return reportBuild(tmpl, started, true)
	}
	fmt.Fprintf(stderr, "building template %s (%s)\n", tmpl.Name, shortID(tmpl.ID))
	logs, err := c.TemplateLogs(ctx, tmpl.Name, 0)
	if err != nil {
		return fmt.Errorf("follow the build log of template %s: %w", tmpl.Name, err)
	}
	defer logs.Close()
	for {
		ev, err := logs.Next()
		if err != nil {
			return fmt.Errorf("follow the build log of template %s: %w", tmpl.Name, err)
		}
		if ev.Done {
			return reportBuild(ev.Template, started, false)
		}
		// The elapsed time is the progress indicator: recipes vary too much
		// for a meaningful percentage.
		fmt.Fprintf(stdout, "[%6.1fs] %s\n", time.Since(started).Seconds(), ev.Line)
	}
}

// uploadTemplate submits the recipe with the archive at path.
func uploadTemplate(ctx context.Context, c *client.Client, req apiv1.CreateTemplateRequest, path string) (*apiv1.Template, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the archive: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open the archive: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("the archive %s is not a regular file", path)
	}
	return c.CreateTemplateFromArchive(ctx, req, f, info.Size())
}

func readRecipe(recipePath string) (string, error) {
	var (
		raw []byte
		err error
	)
	if recipePath == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(recipePath)
	}
	if err != nil {
		return "", fmt.Errorf("read recipe: %w", err)
	}
	return string(raw), nil
}

// reportBuild prints the outcome of a build and fails when it failed.
func reportBuild(tmpl *apiv1.Template, started time.Time, cached bool) error {
	switch tmpl.State {
	case apiv1.TemplateReady:
		how := fmt.Sprintf("in %.1fs", time.Since(started).Seconds())
		if cached {
			how = "(already built)"
		}
		fmt.Fprintf(stderr, "template %s is ready %s: id %s, %s\n", tmpl.Name, how, shortID(tmpl.ID), humanBytes(tmpl.SizeBytes))
		return nil
	case apiv1.TemplateFailed:
		if tmpl.Reason != "" {
			return fmt.Errorf("template %s failed to build: %s", tmpl.Name, tmpl.Reason)
		}
		return fmt.Errorf("template %s failed to build", tmpl.Name)
	default:
		return fmt.Errorf("template %s ended the build in state %q", tmpl.Name, tmpl.State)
	}
}

func runTemplateList(ctx context.Context, args []string) error {
	fs := newFlagSet("space template ls", "List templates as a table.")
	if err := parseNoArgs(fs, args, "template ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	templates, err := c.ListTemplates(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "NAME", "STATE", "ID", "FROM", "SIZE", "SANDBOXES", "CREATED")
	for _, tmpl := range templates {
		t.row(tmpl.Name, tmpl.State, shortID(tmpl.ID), tmpl.From, humanBytes(tmpl.SizeBytes),
			strconv.Itoa(tmpl.Sandboxes), ago(tmpl.CreatedAt))
	}
	return t.flush()
}

func runTemplateGet(ctx context.Context, args []string) error {
	fs := newFlagSet("space template get NAME", "Print a template as JSON, with its build log.")
	name, err := parseOneName(fs, args, "template get", "template name")
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	tmpl, err := c.GetTemplate(ctx, name)
	if err != nil {
		return err
	}
	return printJSON(tmpl)
}

func runTemplateRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space template rm NAME...", "Remove templates. A template in use by sandboxes cannot be removed.")
	names, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fs.usageErrorf("template rm needs at least one template name")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return forEach(names, func(name string) error { return c.DeleteTemplate(ctx, name) })
}

// parseNoArgs parses a command that takes only flags.
func parseNoArgs(fs *flagSet, args []string, name string) error {
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return fs.usageErrorf("%s takes no arguments, got %q", name, positional[0])
	}
	return nil
}

// parseOneName parses a command that takes exactly one argument, described
// by what ("template name", "key ID").
func parseOneName(fs *flagSet, args []string, name, what string) (string, error) {
	positional, err := fs.parse(args, true)
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		return "", fs.usageErrorf("%s needs exactly one %s", name, what)
	}
	return positional[0], nil
}
