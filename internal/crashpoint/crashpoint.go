// Package crashpoint lets the crash tests kill the server at a named moment
// of an operation. It is test-only: unless the environment variable
// SPACE_TEST_CRASH_AT is set, Hit does nothing.
//
// SPACE_TEST_CRASH_AT names a file. Hit("<point>") reads it and, when it
// holds "<point>", makes the process SIGKILL itself, so a test can crash a
// `space serve` between two exact steps of an operation, arming one point
// at a time without restarting the server (test/e2e/crash_test.go; the
// points are listed in docs/lifecycle.md).
package crashpoint

import (
	"os"
	"strings"
	"syscall"
)

// file is read once: it is fixed for the life of the process.
var file = os.Getenv("SPACE_TEST_CRASH_AT")

// Hit kills the process with SIGKILL if point is the armed one. Nothing
// runs after it: no deferred call, no flush, as in a power cut of the
// server (sandboxes, which are other processes, live on).
func Hit(point string) {
	if file == "" {
		return
	}
	if armed, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(armed)) == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered asynchronously; never go on
	}
}
