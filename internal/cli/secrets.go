package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

var secretCommands = []command{
	{"set", "store a secret read from stdin", runSecretsSet},
	{"ls", "list secrets (names only)", runSecretsList},
	{"rm", "remove secrets", runSecretsRemove},
}

func runSecrets(ctx context.Context, args []string) error {
	return dispatch(ctx, "space secrets", secretCommands, args)
}

// maxSecretInput bounds what set reads: the server's limit plus a newline.
const maxSecretInput = 64<<10 + 2

func runSecretsSet(ctx context.Context, args []string) error {
	fs := newFlagSet("space secrets set NAME", `
Store a secret for credential rules, replacing any value it had. The value
is read from stdin (one trailing newline is dropped); on a terminal you are
prompted for it without echo. The server keeps it encrypted and never shows
it again. Secrets belong to a project: PROJECT/NAME stores one of another
project (a bare NAME is the admin key's project, "default"); only that
project's sandboxes can name it in credential rules. Needs the admin key.

  echo -n "$TOKEN" | space secrets set API_TOKEN
  echo -n "$TOKEN" | space secrets set team-a/API_TOKEN`)
	name, err := parseOneName(fs, args, "secrets set", "secret name")
	if err != nil {
		return err
	}
	value, err := readSecretValue(name)
	if err != nil {
		return err
	}
	if value == "" {
		return fmt.Errorf("no value for secret %s on stdin", name)
	}
	c, err := connect()
	if err != nil {
		return err
	}
	_, created, err := c.SetSecret(ctx, name, value)
	if err != nil {
		return err
	}
	verb := "replaced"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stderr, "%s secret %s\n", verb, name)
	return nil
}

// readSecretValue reads the value from a terminal without echo, or from
// piped stdin.
func readSecretValue(name string) (string, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(stderr, "value for %s (not shown): ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read the value of %s: %w", name, err)
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("read the value of %s from stdin: %w", name, err)
	}
	if len(b) > maxSecretInput {
		return "", fmt.Errorf("the value of %s on stdin is longer than 64 KiB", name)
	}
	v := string(b)
	if t, ok := strings.CutSuffix(v, "\n"); ok {
		v = strings.TrimSuffix(t, "\r")
	}
	return v, nil
}

func runSecretsList(ctx context.Context, args []string) error {
	fs := newFlagSet("space secrets ls", "List stored secrets: names and times, never values. Needs the admin key.")
	if err := parseNoArgs(fs, args, "secrets ls"); err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	list, err := c.ListSecrets(ctx)
	if err != nil {
		return err
	}
	t := newTable(stdout, "PROJECT", "NAME", "CREATED", "UPDATED")
	for _, s := range list {
		t.row(s.Project, s.Name, ago(s.CreatedAt), ago(s.UpdatedAt))
	}
	return t.flush()
}

func runSecretsRemove(ctx context.Context, args []string) error {
	fs := newFlagSet("space secrets rm NAME...", "Remove secrets (PROJECT/NAME for another project's). A secret that a live sandbox's credential rules use is kept (delete the sandbox first). Needs the admin key.")
	names, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fs.usageErrorf("secrets rm needs at least one secret name")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return forEach(names, func(name string) error { return c.DeleteSecret(ctx, name) })
}
