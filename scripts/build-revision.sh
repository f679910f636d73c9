#!/usr/bin/env bash
# Builds space and space-agent of a revision from the repository's
# history, once per machine, into .tools/cache/space-<rev, 12 digits>, and
# prints that directory. Used by the upgrade test (the release a data dir
# upgrades from) and scripts/bench-compare.sh.
#
#   ./scripts/build-revision.sh REV
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
  echo "usage: $0 REV" >&2
  exit 2
fi
if ! rev=$(git rev-parse --verify --quiet "$1^{commit}"); then
  echo "build-revision: $1 is not in this clone's history (a full clone has it)" >&2
  exit 1
fi
dir=".tools/cache/space-${rev:0:12}"
if [ ! -x "$dir/space-agent" ]; then
  mkdir -p .tools/cache
  src=$(mktemp -d)
  # Built aside and renamed into place: another run may build it too.
  tmp=$(mktemp -d .tools/cache/space-build-XXXXXX)
  trap 'rm -rf "$src" "$tmp"' EXIT
  git archive "$rev" | tar -x -C "$src"
  echo "build-revision: building ${rev:0:12}" >&2
  (cd "$src" && CGO_ENABLED=0 go build -o "$OLDPWD/$tmp/space" ./cmd/space &&
    CGO_ENABLED=0 go build -o "$OLDPWD/$tmp/space-agent" ./cmd/space-agent)
  mv -T "$tmp" "$dir" 2>/dev/null || true
fi
echo "$PWD/$dir"
