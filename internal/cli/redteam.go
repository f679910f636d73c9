package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/space-platform/space/internal/redteam"
	"github.com/space-platform/space/pkg/client"
)

func runRedteam(ctx context.Context, args []string) error {
	fs := newFlagSet("space redteam [flags]", `
Attack a running space server from inside its own sandboxes: scripted
escape and bypass attempts (filesystem, process, kernel, network, dns,
credentials, resources) from an attacker sandbox, next to a victim and a
bystander sandbox. Prints one line per attempt: blocked (expected),
ESCAPED (a security finding, with its evidence), error (the attempt could
not run as designed) or skipped (it needs a feature or flag that is
missing). Exits 1 if anything escaped or errored.

Run it as root on the server's host: it plants canaries there (a file, a
listener on every host address, a process) and checks them after every
attempt. Every sandbox it creates is deleted again. See docs/security.md.`)
	cfg := redteam.Config{}
	fs.StringVar(&cfg.Template, "template", "base", "template of the sandboxes (the scripts need bash, python3 and curl)")
	fs.StringVar(&cfg.Runtime, "runtime", "", "backend of the sandboxes and templates: gvisor or microvm (default: the template's; it must be built for it)")
	fs.IntVar(&cfg.MemoryMB, "memory-mb", 0, "memory of the sandboxes that need no more (default: the server's; small guests keep a microvm run affordable)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	only := fs.String("only", "", "run one category: "+categoryNames())
	var names stringList
	fs.Var(&names, "name", "run the attempt of this `NAME` (repeatable; with --only, only those of the category)")
	fs.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "the server's --data-dir, whose agent binary and keys are checked (empty: not checked)")
	fs.StringVar(&cfg.Reach, "reach", "", "host:port of an HTTP server the attacker is allowed to reach (the control for network attempts)")
	fs.StringVar(&cfg.Unallowed, "unallowed", "", "host:port of an HTTP server outside the attacker's policy")
	fs.StringVar(&cfg.AllowedName, "allowed-name", "", "a domain that resolves to an address which also serves --denied-name")
	fs.StringVar(&cfg.DeniedName, "denied-name", "", "a domain the DNS attempts' policy denies (it must resolve upstream)")
	fs.StringVar(&cfg.RebindName, "rebind-name", "", "a domain that resolves upstream to a private address")
	if err := parseNoArgs(fs, args, "redteam"); err != nil {
		return err
	}
	if *only != "" {
		c, err := redteam.ParseCategory(*only)
		if err != nil {
			return fs.usageErrorf("--only: %v", err)
		}
		cfg.Only = []redteam.Category{c}
	}
	for _, n := range names {
		if len(redteam.Select(redteam.Catalog(), nil, []string{n})) == 0 {
			return fs.usageErrorf("--name %q: no attempt has that name (docs/security.md lists them)", n)
		}
	}
	cfg.Names = names
	c, err := connect()
	if err != nil {
		return err
	}
	cfg.URL = c.BaseURL()
	if cfg.APIKey, err = apiKey(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "redteam: not root: the host checks of the server's files are left out")
	}
	cfg.Log = stderr
	cfg.Progress = func(r redteam.Result) {
		fmt.Fprintf(stderr, "redteam: %-8s %-12s %s\n", r.Outcome, r.Category, r.Name)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, runErr := redteam.Run(ctx, cfg)
	if report != nil && len(report.Results) > 0 {
		if *asJSON {
			if err := printJSON(report); err != nil {
				return err
			}
		} else if err := printRedteamTable(report); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	if failures := report.Failures(); len(failures) > 0 {
		return fmt.Errorf("%d of %d attempts escaped or could not run", len(failures), len(report.Results))
	}
	return nil
}

// apiKey is the key the CLI authenticates with, which the red team also
// hunts for inside the sandboxes.
func apiKey() (string, error) {
	if k := strings.TrimSpace(os.Getenv("SPACE_API_KEY")); k != "" {
		return k, nil
	}
	dir := os.Getenv("SPACE_DATA_DIR")
	if dir == "" {
		dir = client.DefaultDataDir
	}
	b, err := os.ReadFile(dir + "/admin.key")
	if err != nil {
		return "", fmt.Errorf("no API key: set SPACE_API_KEY or make %s/admin.key readable", dir)
	}
	return strings.TrimSpace(string(b)), nil
}

func categoryNames() string {
	names := make([]string, len(redteam.Categories))
	for i, c := range redteam.Categories {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

func printRedteamTable(report *redteam.Report) error {
	t := newTable(stdout, "ATTEMPT", "CATEGORY", "EXPECTED", "OUTCOME", "EVIDENCE")
	for _, r := range report.Results {
		t.row(r.Name, string(r.Category), r.Expected, string(r.Outcome), clip(r.Evidence, 110))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d attempts: %d blocked, %d ESCAPED, %d error, %d skipped\n", len(report.Results),
		report.Count(redteam.Blocked), report.Count(redteam.Escaped), report.Count(redteam.Errored), report.Count(redteam.Skipped))
	for _, r := range report.Failures() {
		fmt.Fprintf(stdout, "\n%s %q (%s): %s\n", r.Outcome, r.Name, r.Escape, r.Evidence)
	}
	for _, n := range report.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return nil
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\t", " ")
	if len([]rune(s)) > n {
		return string([]rune(s)[:n-1]) + "…"
	}
	return s
}
