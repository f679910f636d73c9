// Package testtier is the one mechanism by which a test says which tier
// of the suite runs it (docs/testing.md):
//
//   - the quick tier, `./scripts/test.sh --quick` (go test -short): unit
//     tests, the fake-backed conformance suites and the end-to-end smoke
//     set, in five minutes;
//   - the full tier, `./scripts/test.sh`: everything, as CI runs it.
//
// A test that needs a long boot or build calls Full first; in the quick
// tier it is skipped with a reason that names the tier that runs it, so
// that the report of a quick run (.tools/test-times.txt) lists what it
// left out and why.
package testtier

import "testing"

// FullOnly is how every skip of the quick tier begins.
const FullOnly = "full tier only (./scripts/test.sh): "

// Quick reports whether this is a quick-tier run.
func Quick() bool { return testing.Short() }

// Full skips t in the quick tier; why says what makes it too slow there
// ("boots a microVM guest under TCG").
func Full(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(FullOnly + why)
	}
}
