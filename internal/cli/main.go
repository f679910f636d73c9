// Package cli is the space command line: a thin front end over pkg/client
// with one file per subcommand (sandbox.go, exec.go, shell.go, cp.go, ...).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/space-platform/space/pkg/client"
)

// The process's standard streams, as variables so tests can capture output.
var (
	stdin  io.Reader = os.Stdin
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

// connect builds the API client; tests replace it to point at a fake server.
var connect = func() (*client.Client, error) {
	return client.FromEnv(client.WithUserAgent("space-cli"))
}

// command is one subcommand. run receives the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

// topCommands is the table behind "space CMD"; help.go prints it.
var topCommands []command

func init() {
	// Built in init because runHelp refers back to topCommands.
	topCommands = []command{
		{"sandbox", "create, list, inspect and remove sandboxes", runSandbox},
		{"exec", "run a command in a sandbox and stream its output", runExec},
		{"shell", "open an interactive shell in a sandbox", runShell},
		{"cp", "copy files between the local machine and a sandbox", runCp},
		{"template", "build, list, inspect and remove templates", runTemplate},
		{"volume", "create, list and remove persistent volumes", runVolume},
		{"keys", "create, list and revoke API keys (admin key only)", runKeys},
		{"projects", "list projects and set their quotas (admin key only)", runProjects},
		{"secrets", "store, list and remove secrets for credential rules (admin key only)", runSecrets},
		{"pause", "pause a sandbox", runPause},
		{"resume", "resume a paused or suspended sandbox", runResume},
		{"suspend", "suspend a sandbox to disk", runSuspend},
		{"snapshot", "create, list and remove snapshots of a sandbox", runSnapshot},
		{"restore", "restore a sandbox from a snapshot", runRestore},
		{"branch", "start copies of a sandbox", runBranch},
		{"events", "show a sandbox's lifecycle events", runEvents},
		{"network", "show or change a sandbox's egress policy", runNetwork},
		{"serve", "run the space server", runServe},
		{"node", "run a cluster node, or list, cordon, drain and remove nodes", runNode},
		{"control-plane", "run a control-plane replica of a cluster", runControlPlane},
		{"bench", "benchmark a space server", runBench},
		{"redteam", "attack a space server from inside its sandboxes", runRedteam},
		{"help", "show help for a command", runHelp},
	}
}

// Main runs the command line with args (without the program name) and
// returns the process exit code: 0 on success, 1 on failure, 2 on a usage
// error, or the remote command's code for exec and shell.
func Main(args []string) int {
	return exitCode(dispatch(context.Background(), "space", topCommands, args))
}

// dispatch runs the subcommand named by args[0] from table.
func dispatch(ctx context.Context, prefix string, table []command, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "missing command", usage: groupUsage(prefix, table)}
	}
	name := args[0]
	if name == "-h" || name == "-help" || name == "--help" {
		return &helpRequest{text: groupUsage(prefix, table)}
	}
	for _, cmd := range table {
		if cmd.name == name {
			return cmd.run(ctx, args[1:])
		}
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", prefix+" "+name), usage: groupUsage(prefix, table)}
}

// usageError is a mistake on the command line: exit code 2 and a hint.
type usageError struct {
	msg   string
	usage string
}

func (e *usageError) Error() string { return e.msg }

// helpRequest is returned for -h: the usage goes to stdout with exit code 0.
type helpRequest struct{ text string }

func (e *helpRequest) Error() string { return "help requested" }

// exitStatus carries a remote command's exit code out of exec and shell.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode prints err the way a user wants to read it and maps it to the
// process exit code.
func exitCode(err error) int {
	var (
		help  *helpRequest
		usage *usageError
		exit  *exitStatus
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "space: %s\n", usage.msg)
		if usage.usage != "" {
			fmt.Fprintf(stderr, "\n%s", usage.usage)
		}
		return 2
	case errors.As(err, &exit):
		return exit.code
	default:
		fmt.Fprintf(stderr, "space: %s\n", describeError(err))
		return 1
	}
}

// describeError turns an error into one plain sentence: the server's own
// message for API errors, and "cannot reach" instead of Go's
// `Get "http://...": dial tcp ...` for connection failures.
func describeError(err error) string {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Error()
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		server := urlErr.URL
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			server = u.Scheme + "://" + u.Host
		}
		return fmt.Sprintf("cannot reach the space server at %s: %s", server, innermost(urlErr.Err))
	}
	return err.Error()
}

// innermost returns the last message of a wrapped error chain, which for
// network errors is the useful part ("connection refused").
func innermost(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
