// Command space is the command line of the space sandbox platform; see
// internal/cli for the commands.
package main

import (
	"os"

	"github.com/space-platform/space/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
