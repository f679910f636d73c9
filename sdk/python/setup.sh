#!/usr/bin/env bash
# Installs sdk/python's pinned dev environment (httpx, pytest) and prints the
# virtualenv's path.
#
# The virtualenv is .tools/venv/sdk-py-<sha256 of requirements-dev.txt and the
# interpreter's version, 12 digits>: a changed lockfile or Python gets a new
# one, an unchanged one installs nothing (a stamp written after a complete
# install marks it ready). Every package, transitive ones included, comes
# from PyPI with --require-hashes --no-deps. The SDK itself is not installed:
# pytest.ini puts src/ on the path, so the tests run the working tree.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lock="$here/requirements-dev.txt"
python="${PYTHON:-python3}"
sum="$( { cat "$lock"; "$python" -VV; } | sha256sum | cut -c1-12)"
venvs="${SPACE_TOOLS_DIR:-$root/.tools}/venv"
venv="$venvs/sdk-py-$sum"
mkdir -p "$venvs"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.space-installed" ]; then
  rm -rf "$venv"
  echo "==> installing the sdk/python dev environment into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input \
    --require-hashes --no-deps --only-binary=:all: -r "$lock" >&2
  "$venv/bin/python" -m pip check >&2
  cp "$lock" "$venv/.space-installed"
fi
echo "$venv"
