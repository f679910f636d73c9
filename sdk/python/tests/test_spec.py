"""The SDK against docs/openapi.yaml: every operation of the spec (method +
path) has an entry in the mapping table, and every entry a method on both
clients. Offline: no server needed."""

import inspect
import pathlib
import re
import subprocess
import sys

from space_sandbox import OPERATIONS, AsyncClient, Client

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = ROOT / "docs" / "openapi.yaml"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def spec_operations():
    """(operationId, METHOD, path) of every operation, read from the paths
    section by indentation (the file is written in one regular style; a
    YAML library is not worth a dependency for this)."""
    ops, path, method, in_paths = [], None, None, False
    for line in SPEC.read_text().splitlines():
        if re.match(r"^\S", line):
            in_paths = line.startswith("paths:")
            continue
        if not in_paths:
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            path, method = m.group(1), None
            continue
        m = re.match(r"^    ([a-z]+):", line)
        if m and m.group(1) in METHODS:
            method = m.group(1).upper()
            ops.append([None, method, path])
            continue
        m = re.match(r"^      operationId:\s*(\S+)", line)
        if m and method:
            ops[-1][0] = m.group(1)
    return [tuple(o) for o in ops]


def test_spec_parses():
    ops = spec_operations()
    assert len(ops) > 50, ops
    assert all(op_id for op_id, _, _ in ops), [o for o in ops if not o[0]]


def test_every_spec_operation_is_mapped():
    mapped = {(o.method, o.path) for o in OPERATIONS.values()}
    missing = [(m, p, i) for i, m, p in spec_operations() if (m, p) not in mapped]
    assert not missing, f"operations of docs/openapi.yaml with no SDK method (add them to _ops.py): {missing}"


def test_mapping_agrees_with_spec():
    spec = {op_id: (m, p) for op_id, m, p in spec_operations()}
    wrong = {k: (o.method, o.path) for k, o in OPERATIONS.items() if spec.get(k) != (o.method, o.path)}
    assert not wrong, f"mapping entries that are not in the spec as written: {wrong}"


def test_every_mapped_method_exists_on_both_clients():
    for op_id, op in OPERATIONS.items():
        sync = getattr(Client, op.sdk_method, None)
        asy = getattr(AsyncClient, op.sdk_method, None)
        assert callable(sync), f"Client lacks {op.sdk_method} ({op_id})"
        assert callable(asy), f"AsyncClient lacks {op.sdk_method} ({op_id})"
        if op_id in ("attachSession", "streamTemplateLogs"):
            continue  # these return (async) iterators
        assert inspect.iscoroutinefunction(asy), f"AsyncClient.{op.sdk_method} is not async"
        assert not inspect.iscoroutinefunction(sync), f"Client.{op.sdk_method} is async"


def test_async_client_is_generated_from_sync():
    gen = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "gen_async.py"
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_types_check_strictly():
    """mypy (pinned in requirements-dev.txt) over the package, as mypy.ini
    says: the SDK is typed, and the generated async client is checked too
    (a missing await is a type error)."""
    here = pathlib.Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(here / "mypy.ini")],
                       cwd=here, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
