#!/usr/bin/env bash
# Installs one pinned E2B Python environment and prints its virtualenv path.
#
#   compat/e2b-py/setup.sh baseline|latest
#
# The virtualenv lives at .tools/venv/e2b-py-<name>-<sha256 of <name>.txt
# and the interpreter's version, 12 digits>; scripts/pyvenv.sh installs it
# once, every package from PyPI with `pip install --require-hashes
# --no-deps`. To change versions, edit <name>.in and regenerate the
# lockfiles as README.md says.
set -euo pipefail
name="${1:?usage: setup.sh baseline|latest}"
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../scripts/pyvenv.sh" "$here/$name.txt" "e2b-py-$name"
