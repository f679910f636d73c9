#!/usr/bin/env bash
# Installs sdk/python's pinned dev environment (httpx, pytest) and prints the
# virtualenv's path: .tools/venv/sdk-py-<sha256 of requirements-dev.txt and
# the interpreter's version, 12 digits>, installed once by scripts/pyvenv.sh
# with `pip install --require-hashes --no-deps`. The SDK itself is not
# installed: pytest.ini puts src/ on the path, so the tests run the tree.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../scripts/pyvenv.sh" "$here/requirements-dev.txt" sdk-py
