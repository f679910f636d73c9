package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

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
attempt. Every sandbox it creates is deleted again.

--only server runs the server section instead: with an ordinary project
key (SPACE_API_KEY), from anywhere, attacks on what the key can make the
shared server hold (a gzip-bomb upload, session tags, counts and
listings, unread output past disk_mb, builds past the project's quota,
registry probes of reserved ranges). Each check reports held (the server
answered with its bound) or BROKE (with the sizes, counts and statuses).
The --max-* flags, --seconds, --bomb-mib and --builds bound what the run
itself consumes; it deletes all it made. See docs/security.md.`)
	cfg := redteam.Config{}
	fs.StringVar(&cfg.Template, "template", "base", "template of the sandboxes (the scripts need bash, python3 and curl)")
	fs.StringVar(&cfg.Runtime, "runtime", "", "backend of the sandboxes and templates: gvisor or microvm (default: the template's; it must be built for it)")
	fs.IntVar(&cfg.MemoryMB, "memory-mb", 0, "memory of the sandboxes that need no more (default: the server's; small guests keep a microvm run affordable)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	only := fs.String("only", "", "run one category: "+categoryNames()+"; or server, the server section (with a project key)")
	var names stringList
	fs.Var(&names, "name", "run the attempt of this `NAME` (repeatable; with --only, only those of the category)")
	fs.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "the server's --data-dir, whose agent binary and keys are checked (empty: not checked)")
	fs.StringVar(&cfg.Reach, "reach", "", "host:port of an HTTP server the attacker is allowed to reach (the control for network attempts)")
	fs.StringVar(&cfg.Unallowed, "unallowed", "", "host:port of an HTTP server outside the attacker's policy")
	fs.StringVar(&cfg.AllowedName, "allowed-name", "", "a domain that resolves to an address which also serves --denied-name")
	fs.StringVar(&cfg.DeniedName, "denied-name", "", "a domain the DNS attempts' policy denies (it must resolve upstream)")
	fs.StringVar(&cfg.RebindName, "rebind-name", "", "a domain that resolves upstream to a private address")
	srv := serverSectionFlags(fs)
	if err := parseNoArgs(fs, args, "redteam"); err != nil {
		return err
	}
	if section, err := serverSelected(*only, names); err != nil {
		return fs.usageErrorf("%v", err)
	} else if section {
		templateSet := false
		fs.Visit(func(f *flag.Flag) { templateSet = templateSet || f.Name == "template" })
		if templateSet {
			srv.Template = cfg.Template
		}
		srv.Names = names
		return runServerSection(ctx, srv, *asJSON)
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
	var err error
	if cfg.URL, cfg.APIKey, err = redteamTarget(); err != nil {
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
	return finishRedteam(report, runErr, *asJSON, "attempts escaped")
}

// finishRedteam prints a run's report and turns its failures into the
// command's error, naming them as what ("attempts escaped").
func finishRedteam(report *redteam.Report, runErr error, asJSON bool, what string) error {
	if report != nil && len(report.Results) > 0 {
		if asJSON {
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
		return fmt.Errorf("%d of %d %s or could not run", len(failures), len(report.Results), what)
	}
	return nil
}

// serverSectionFlags declares the flags that bound the server section's
// own consumption.
func serverSectionFlags(fs *flagSet) *redteam.ServerConfig {
	cfg := &redteam.ServerConfig{}
	fs.Var(mibFlag{&cfg.MaxUploadBytes, redteam.DefaultMaxUploadBytes}, "max-upload-mib", "server section: the most it uploads for the server to hold, the bomb and session tags (`MiB`)")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", redteam.DefaultMaxSessions, "server section: the most sessions the flood makes (more than the server keeps per sandbox)")
	fs.IntVar(&cfg.MaxSandboxes, "max-sandboxes", redteam.DefaultMaxSandboxes, "server section: the most sandboxes it makes to fill the project's quota before the build storm")
	cfg.Duration = redteam.DefaultServerDuration
	fs.Var(secondsFlag{&cfg.Duration}, "seconds", "server section: how long it may run, its cleanup apart (`N` seconds)")
	fs.Var(mibFlag{&cfg.BombBytes, redteam.DefaultBombBytes}, "bomb-mib", "server section: what the gzip bomb unpacks to, past the server's build disk limit (`MiB`)")
	fs.IntVar(&cfg.Builds, "builds", redteam.DefaultBuilds, "server section: how many builds the storm submits at once")
	return cfg
}

// serverSelected reports whether the flags ask for the server section:
// --only server, or --name of its checks only.
func serverSelected(only string, names []string) (bool, error) {
	server := 0
	for _, n := range names {
		if slices.Contains(redteam.ServerCheckNames(), n) {
			server++
		}
	}
	switch {
	case strings.TrimSpace(strings.ToLower(only)) == string(redteam.ServerSection):
		if server < len(names) {
			return false, fmt.Errorf("--only server: --name must name checks of the server section (%s)", strings.Join(redteam.ServerCheckNames(), "; "))
		}
		return true, nil
	case server > 0 && (only != "" || server < len(names)):
		return false, errors.New("--name: the server section's checks run on their own, without --only and the sandbox attempts")
	}
	return server > 0, nil
}

// mibFlag is a size flag given in MiB and kept in bytes.
type mibFlag struct {
	bytes *int64
	def   int64
}

func (m mibFlag) String() string {
	if m.bytes == nil {
		return ""
	}
	if *m.bytes == 0 {
		return strconv.FormatInt(m.def>>20, 10)
	}
	return strconv.FormatInt(*m.bytes>>20, 10)
}

func (m mibFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a whole number of MiB, at least 1", s)
	}
	*m.bytes = n << 20
	return nil
}

// secondsFlag is a duration flag given in whole seconds.
type secondsFlag struct{ d *time.Duration }

func (f secondsFlag) String() string {
	if f.d == nil {
		return ""
	}
	return strconv.Itoa(int(f.d.Seconds()))
}

func (f secondsFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a whole number of seconds, at least 1", s)
	}
	*f.d = time.Duration(n) * time.Second
	return nil
}

// runServerSection plays the server section and prints its report.
func runServerSection(ctx context.Context, cfg *redteam.ServerConfig, asJSON bool) error {
	var err error
	if cfg.URL, cfg.APIKey, err = redteamTarget(); err != nil {
		return err
	}
	cfg.Log = stderr
	cfg.Progress = func(r redteam.Result) {
		fmt.Fprintf(stderr, "redteam: %-8s %s\n", r.Outcome, r.Name)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, runErr := redteam.RunServer(ctx, *cfg)
	return finishRedteam(report, runErr, asJSON, "checks broke")
}

// redteamTarget is the server's URL and the key a red-team run uses.
func redteamTarget() (url, key string, err error) {
	c, err := connect()
	if err != nil {
		return "", "", err
	}
	key, err = apiKey()
	return c.BaseURL(), key, err
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
	outcomes := []redteam.Outcome{redteam.Blocked, redteam.Escaped, redteam.Errored, redteam.Skipped}
	if report.Count(redteam.Held)+report.Count(redteam.Broke) > 0 {
		outcomes = []redteam.Outcome{redteam.Held, redteam.Broke, redteam.Errored, redteam.Skipped}
	}
	counts := make([]string, len(outcomes))
	for i, o := range outcomes {
		counts[i] = fmt.Sprintf("%d %s", report.Count(o), o)
	}
	fmt.Fprintf(stdout, "\n%d attempts: %s\n", len(report.Results), strings.Join(counts, ", "))
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
