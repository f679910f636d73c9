#!/usr/bin/env bash
# Runs every test of space: unit tests and end-to-end tests against real
# gVisor sandboxes. Needs root; installs what a fresh machine lacks first.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
# kube-apiserver and helm for the server-side dry-run tests (internal/kubetest);
# cached under .tools after the first build (about 15 minutes on 2 cores).
./scripts/kube-tools.sh --only apiserver,helm
echo "==> go vet"
go vet ./...
echo "==> go test (race detector on)"
go test -race -count=1 -timeout 60m ./...
