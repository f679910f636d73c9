package cli

import (
	"bytes"
	"context"
	"fmt"
	"text/tabwriter"
)

const environmentHelp = `Environment:
  SPACE_URL        server address (default http://127.0.0.1:7070)
  SPACE_API_KEY    API key; when unset, the admin key is read from
                   $SPACE_DATA_DIR/admin.key (default /var/lib/space/admin.key)
`

// runHelp implements "space help [COMMAND [SUBCOMMAND]]" by asking the
// command itself for its usage, so the text lives next to the flags.
func runHelp(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &helpRequest{text: groupUsage("space", topCommands)}
	}
	if args[0] == "help" {
		return &helpRequest{text: "Usage: space help [COMMAND [SUBCOMMAND]]\n\nShow help for a command.\n"}
	}
	return dispatch(ctx, "space", topCommands, append(args[:len(args):len(args)], "-h"))
}

// groupUsage lists the commands of a command group ("space", "space sandbox").
func groupUsage(prefix string, table []command) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: %s COMMAND [ARGUMENTS]\n\nCommands:\n", prefix)
	w := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	for _, cmd := range table {
		fmt.Fprintf(w, "  %s\t%s\n", cmd.name, cmd.summary)
	}
	w.Flush()
	fmt.Fprintf(&b, "\nRun '%s COMMAND -h' for help on a command.\n", prefix)
	if prefix == "space" {
		b.WriteString("\n" + environmentHelp)
	}
	return b.String()
}
