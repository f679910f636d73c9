//go:build !unix

package cli

import "context"

// watchWindowSize is a no-op where there is no SIGWINCH; the remote
// terminal keeps the size it started with.
func watchWindowSize(ctx context.Context, resized func()) {}
