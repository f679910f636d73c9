#!/usr/bin/env bash
# Installs schemathesis, pinned with hashes by fuzz.txt, into a cached
# virtualenv under .tools/venv (scripts/pyvenv.sh) and prints its path.
#
#   compat/fuzz/setup.sh
#
# To change versions, edit fuzz.in and regenerate fuzz.txt as README.md
# says.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../scripts/pyvenv.sh" "$here/fuzz.txt" fuzz
