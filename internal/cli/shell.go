package cli

import (
	"context"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func runShell(ctx context.Context, args []string) error {
	fs := newFlagSet("space shell [flags] ID [-- CMD [ARG...]]", `
Open an interactive terminal in a sandbox. The default command is
"/bin/bash -l", or "/bin/sh -l" when the sandbox has no bash. The window
size follows the local terminal.`)
	env := keyValues{}
	fs.Var(env, "env", "environment variable `KEY=VALUE` (repeatable)")
	cwd := fs.String("cwd", "", "working `directory` of the shell")
	user := fs.String("user", "", "`user` to run the shell as")
	positional, err := fs.parse(args, false)
	if err != nil {
		return err
	}
	if len(positional) == 0 {
		return fs.usageErrorf("shell needs a sandbox ID")
	}
	sandboxID, cmd := positional[0], positional[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	c, err := connect()
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		if cmd, err = defaultShell(ctx, c, sandboxID); err != nil {
			return err
		}
	}
	return runSession(ctx, c, sandboxID, apiv1.CreateSessionRequest{
		Cmd:   cmd,
		Env:   env.orNil(),
		Cwd:   *cwd,
		User:  *user,
		TTY:   true,
		Stdin: true,
	})
}

// defaultShell prefers bash, which minimal images (alpine, distroless with
// busybox) often lack.
func defaultShell(ctx context.Context, c *client.Client, sandboxID string) ([]string, error) {
	res, err := c.Exec(ctx, sandboxID, apiv1.ExecRequest{Cmd: []string{"test", "-x", "/bin/bash"}})
	if err != nil {
		return nil, err // the server's sentence ("sandbox x not found") says it all
	}
	if res.ExitCode == 0 {
		return []string{"/bin/bash", "-l"}, nil
	}
	return []string{"/bin/sh", "-l"}, nil
}
