#!/usr/bin/env bash
# Installs one pinned E2B Python environment and prints its virtualenv path.
#
#   compat/e2b-py/setup.sh baseline|latest
#
# The virtualenv lives at .tools/venv/e2b-py-<name>-<sha256 of <name>.txt
# and the interpreter's version, 12 digits>, installed and cached by
# scripts/pyvenv.sh (`pip install --require-hashes --no-deps`: nothing
# outside the lockfile can slip in). To change versions, edit <name>.in and
# regenerate the lockfiles as README.md says.
set -euo pipefail
name="${1:?usage: setup.sh baseline|latest}"
here="$(cd "$(dirname "$0")" && pwd)"
lock="$here/$name.txt"
[ -f "$lock" ] || { echo "setup.sh: no lockfile $lock" >&2; exit 2; }
exec "$here/../../scripts/pyvenv.sh" "$lock" "e2b-py-$name"
