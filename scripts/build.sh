#!/usr/bin/env bash
# Builds the space CLI/server and the in-sandbox agent, both static, into
# .tools/bin (where `space serve` finds runsc and the agent).
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p .tools/bin
echo "==> building space and space-agent"
CGO_ENABLED=0 go build -o .tools/bin/space ./cmd/space
CGO_ENABLED=0 go build -o .tools/bin/space-agent ./cmd/space-agent
