//go:build unix

package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// watchWindowSize calls resized whenever the terminal window changes size
// (SIGWINCH) until ctx ends.
func watchWindowSize(ctx context.Context, resized func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			resized()
		}
	}
}
