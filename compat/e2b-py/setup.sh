#!/usr/bin/env bash
# Installs one pinned E2B Python environment and prints its virtualenv path.
#
#   compat/e2b-py/setup.sh baseline|latest
#
# The virtualenv lives at .tools/venv/e2b-py-<name>-<sha256 of <name>.txt
# and the interpreter's version, 12 digits>, so a changed lockfile or
# Python gets a new environment and an unchanged one installs nothing: a stamp written after a complete install marks it
# ready (a half-installed one, left by an interrupted run, is rebuilt).
# Every package, transitive ones included, is installed from PyPI with
# `pip install --require-hashes --no-deps`: nothing outside the lockfile
# can slip in. To change versions, edit <name>.in and regenerate the
# lockfiles as README.md says.
set -euo pipefail
name="${1:?usage: setup.sh baseline|latest}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lock="$here/$name.txt"
[ -f "$lock" ] || { echo "setup.sh: no lockfile $lock" >&2; exit 2; }
python="${PYTHON:-python3}"
sum="$( { cat "$lock"; "$python" -VV; } | sha256sum | cut -c1-12)"
venvs="${SPACE_TOOLS_DIR:-$root/.tools}/venv"
venv="$venvs/e2b-py-$name-$sum"
mkdir -p "$venvs"
# One installer at a time per environment (lanes share .tools).
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.space-installed" ]; then
  rm -rf "$venv"
  echo "==> installing $name E2B Python SDKs into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input \
    --require-hashes --no-deps --only-binary=:all: -r "$lock" >&2
  "$venv/bin/python" -m pip check >&2
  cp "$lock" "$venv/.space-installed"
fi
echo "$venv"
