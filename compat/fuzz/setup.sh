#!/usr/bin/env bash
# Installs schemathesis, pinned with hashes by fuzz.txt, and prints its
# virtualenv path.
#
#   compat/fuzz/setup.sh
#
# The virtualenv lives at .tools/venv/fuzz-<sha256 of fuzz.txt and the
# interpreter's version, 12 digits>, so a changed lockfile or Python gets a
# new environment and an unchanged one installs nothing: a stamp written
# after a complete install marks it ready (a half-installed one, left by an
# interrupted run, is rebuilt). Every package, transitive ones included, is
# installed with `pip install --require-hashes --no-deps`: nothing outside
# the lockfile can slip in. To change versions, edit fuzz.in and regenerate
# fuzz.txt as README.md says.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lock="$here/fuzz.txt"
python="${PYTHON:-python3}"
sum="$( { cat "$lock"; "$python" -VV; } | sha256sum | cut -c1-12)"
venvs="${SPACE_TOOLS_DIR:-$root/.tools}/venv"
venv="$venvs/fuzz-$sum"
mkdir -p "$venvs"
# One installer at a time per environment (lanes share .tools).
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.space-installed" ]; then
  rm -rf "$venv"
  echo "==> installing schemathesis into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input \
    --require-hashes --no-deps --only-binary=:all: -r "$lock" >&2
  "$venv/bin/python" -m pip check >&2
  cp "$lock" "$venv/.space-installed"
fi
echo "$venv"
