#!/usr/bin/env bash
# Runs every test of space: unit tests and end-to-end tests against real
# gVisor sandboxes. Needs root; installs what a fresh machine lacks first.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
# kube-apiserver and helm for the server-side dry-run tests (internal/kubetest);
# cached under .tools after the first build (about 15 minutes on 2 cores).
./scripts/kube-tools.sh --only apiserver,helm
# The OCI image of space, which test/image unpacks and runs (cached: a
# second run only rebuilds the binaries and finds the archive up to date).
./scripts/image.sh space
export SPACE_IMAGE_ARCHIVE="$PWD/.tools/images/space.oci.tar"
echo "==> go vet"
go vet ./...
echo "==> go test (race detector on)"
go test -race -count=1 -timeout 60m ./...
