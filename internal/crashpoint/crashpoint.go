// Package crashpoint lets the crash tests kill the server at a named moment
// of an operation. It is test-only: unless the environment variable
// SPACE_TEST_CRASH_AT names a point, Hit does nothing.
//
// SPACE_TEST_CRASH_AT=<point> makes the process SIGKILL itself the first
// time execution reaches crashpoint.Hit("<point>"), so a test can crash a
// `space serve` between two exact steps (see test/e2e/crash_test.go and
// docs/lifecycle.md for the points).
package crashpoint

import (
	"os"
	"syscall"
)

// at is read once: the point is fixed for the life of the process.
var at = os.Getenv("SPACE_TEST_CRASH_AT")

// Hit kills the process with SIGKILL if point is the one the environment
// names. Nothing runs after it: no deferred call, no flush, like a power cut
// of the server (sandboxes, which are other processes, live on).
func Hit(point string) {
	if at != "" && point == at {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered asynchronously; never go on
	}
}
