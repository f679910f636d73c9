#!/usr/bin/env bash
# Installs a hash-pinned Python lockfile into a cached virtualenv and
# prints its path (compat/e2b-py, compat/fuzz and sdk/python setup.sh).
#
#   scripts/pyvenv.sh LOCKFILE NAME
#
# The virtualenv lives at .tools/venv/NAME-<sha256 of LOCKFILE and the
# interpreter's version, 12 digits>, so a changed lockfile or Python gets a
# new environment and an unchanged one installs nothing: a stamp written
# after a complete install marks it ready (a half-installed one, left by an
# interrupted run, is rebuilt). Every package, transitive ones included, is
# installed from PyPI with `pip install --require-hashes --no-deps
# --only-binary=:all:`: nothing outside the lockfile can slip in, and no
# sdist's build code runs. PYTHON picks the interpreter (default python3),
# SPACE_TOOLS_DIR the tools directory (default the repository's .tools).
set -euo pipefail
lock="${1:?usage: pyvenv.sh LOCKFILE NAME}"
name="${2:?usage: pyvenv.sh LOCKFILE NAME}"
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$lock" ] || { echo "pyvenv.sh: no lockfile $lock" >&2; exit 2; }
python="${PYTHON:-python3}"
sum="$( { cat "$lock"; "$python" -VV; } | sha256sum | cut -c1-12)"
venvs="${SPACE_TOOLS_DIR:-$root/.tools}/venv"
mkdir -p "$venvs"
# The scripts a venv installs name its interpreter by the path it was made
# at: made through a symlinked .tools of a worktree since removed, they
# would point nowhere. Make it at the real path, and rebuild one whose
# scripts' interpreters are gone.
venvs="$(realpath "$venvs")"
venv="$venvs/$name-$sum"
stale() {
  local f line
  for f in "$venv"/bin/*; do
    [ -f "$f" ] || continue
    IFS= read -r line < "$f" || continue
    case "$line" in '#!/'*) line="${line#\#!}"; [ -x "${line%% *}" ] || return 0 ;; esac
  done
  return 1
}
# One installer at a time per environment (lanes share .tools).
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.space-installed" ] || stale; then
  rm -rf "$venv"
  echo "==> installing $name ($(basename "$lock")) into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input \
    --require-hashes --no-deps --only-binary=:all: -r "$lock" >&2
  "$venv/bin/python" -m pip check >&2
  cp "$lock" "$venv/.space-installed"
fi
echo "$venv"
