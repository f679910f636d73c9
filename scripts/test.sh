#!/usr/bin/env bash
# Runs the tests of space against real gVisor sandboxes, btrfs and network
# namespaces. Needs root; installs what a fresh machine lacks first.
#
#   ./scripts/test.sh                  the full tier: every test (what CI runs)
#   ./scripts/test.sh --quick          the quick tier (go test -short): unit
#                                      tests, fake-backed conformance suites
#                                      and the end-to-end smoke set
#   ./scripts/test.sh [--quick] ./internal/node -run TestX
#                                      one package or test (arguments go to
#                                      go test; without a package, all)
#
# Either way the run's `go test -json` stream is kept in .tools/test.json
# and the 25 slowest packages and tests in .tools/test-times.txt
# (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
args=("$@")
has_pkg=0
for a in "${args[@]}"; do
  case "$a" in ./*|github.com/*) has_pkg=1 ;; esac
done

began=$(date +%s)
./scripts/install-deps.sh
mkdir -p .tools/bin
if [ $quick = 1 ]; then
  # helm renders the chart (test/kubernetes); the quick tier runs no
  # kube-apiserver (internal/kubetest skips there).
  ./scripts/kube-tools.sh --only helm
else
  # kube-apiserver and helm for the server-side dry-run tests
  # (internal/kubetest); cached under .tools after the first build (about
  # five minutes on 2 cores).
  ./scripts/kube-tools.sh --only apiserver,helm
  # The OCI image of space, which test/image unpacks and runs (cached: a
  # second run only rebuilds the binaries and finds the archive up to date).
  ./scripts/image.sh space
  export SPACE_IMAGE_ARCHIVE="$PWD/.tools/images/space.oci.tar"
  echo "==> go vet"
  go vet ./...
fi
go build -o .tools/bin/testreport ./tools/testreport

tier=full
# -parallel 16: every test of the e2e package's parallel group (the SDK
# suites, the red team, ...) starts at once, and the package bounds
# them itself (groupSlots in test/e2e/harness_test.go), so that
# TestE2BJSSDKs, the longest, never waits for a slot (docs/testing.md).
# No other package has parallel tests.
flags=(-race -count=1 -timeout 60m -parallel 16)
if [ $quick = 1 ]; then
  tier=quick
  flags=(-short -race -count=1 -timeout 15m)
fi
echo "==> go test, $tier tier (race detector on; setup took $(( $(date +%s) - began )) s)"
report=(.tools/bin/testreport -report .tools/test-times.txt -raw .tools/test.json)
rc=.tools/test-rc
rm -f $rc.*
if [ $has_pkg = 0 ]; then
  # Two go test runs side by side: the end-to-end package alone, so that
  # its progress (template builds, clusters) streams as it happens
  # (go test holds a package's output back while other packages run with
  # it), and every other package one at a time beside it.
  others=$(go list ./... | grep -v '/test/e2e$')
  "${report[@]}" \
    <(go test -json "${flags[@]}" "${args[@]}" ./test/e2e 2>&1; echo $? > $rc.e2e) \
    <(go test -json -p 1 "${flags[@]}" "${args[@]}" $others 2>&1; echo $? > $rc.others) || true
else
  "${report[@]}" <(go test -json "${flags[@]}" "${args[@]}" 2>&1; echo $? > $rc.only) || true
fi
for f in $rc.*; do
  if [ "$(cat "$f")" != 0 ]; then
    echo "==> $tier tier FAILED after $(( $(date +%s) - began )) s (go test: exit $(cat "$f"); report in .tools/test-times.txt)"
    exit 1
  fi
done
echo "==> $tier tier passed in $(( $(date +%s) - began )) s"
