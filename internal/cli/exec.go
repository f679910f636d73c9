package cli

import (
	"context"

	"github.com/space-platform/space/pkg/apiv1"
)

func runExec(ctx context.Context, args []string) error {
	fs := newFlagSet("space exec [flags] ID [--] CMD [ARG...]", `
Run a command in a sandbox, streaming its stdout and stderr here and exiting
with its exit code. Local stdin is sent to the command when it is not a
terminal (a pipe or a file) or with --tty. Ctrl-C and SIGTERM are forwarded
to the command; a third Ctrl-C stops waiting for it.`)
	tty := fs.Bool("tty", false, "run the command in a pseudo-terminal")
	fs.BoolVar(tty, "t", false, "shorthand for --tty")
	env := keyValues{}
	fs.Var(env, "env", "environment variable `KEY=VALUE` (repeatable)")
	cwd := fs.String("cwd", "", "working `directory` of the command")
	user := fs.String("user", "", "`user` to run the command as")
	sandboxID, cmd, err := parseExecArgs(fs, args)
	if err != nil {
		return err
	}
	c, err := connect()
	if err != nil {
		return err
	}
	_, inIsTerminal := terminalFd(stdin)
	return runSession(ctx, c, sandboxID, apiv1.CreateSessionRequest{
		Cmd:   cmd,
		Env:   env.orNil(),
		Cwd:   *cwd,
		User:  *user,
		TTY:   *tty,
		Stdin: *tty || !inIsTerminal,
	})
}

// parseExecArgs splits "[flags] ID [--] CMD [ARG...]". Flags are only read
// before ID so that the command's own flags reach it untouched.
func parseExecArgs(fs *flagSet, args []string) (sandboxID string, cmd []string, err error) {
	positional, err := fs.parse(args, false)
	if err != nil {
		return "", nil, err
	}
	if len(positional) == 0 {
		return "", nil, fs.usageErrorf("exec needs a sandbox ID and a command")
	}
	sandboxID, cmd = positional[0], positional[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		return "", nil, fs.usageErrorf("exec needs a command after the sandbox ID")
	}
	return sandboxID, cmd, nil
}
