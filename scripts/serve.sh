#!/usr/bin/env bash
# Starts `space serve` on its embedded default (state and volumes under
# /var/lib/space, API on 127.0.0.1:7070), installing and building what a
# fresh machine lacks first. Extra arguments go to `space serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
./scripts/build.sh
exec ./.tools/bin/space serve "$@"
