"""Shared helpers of the E2B Python compatibility suite.

The suite runs the unmodified E2B Python SDKs against a live space server.
E2B_API_URL, E2B_API_KEY and either E2B_SANDBOX_URL (header routing) or
E2B_DOMAIN with E2B_PY_PROXY (host routing through a TLS terminator; see
test/e2e/e2b_py_test.go) come from the environment; E2B_TEMPLATE defaults
to base, which has the /bin/bash the SDKs run commands with.
"""

import asyncio
import os
import time

import pytest

TEMPLATE = os.environ.get("E2B_TEMPLATE", "base")

# The SDKs' proxy option, for the host-routing run: every request of the
# process goes through it (the baseline SDK keeps one transport per
# process, built with the first request's options).
PROXY = os.environ.get("E2B_PY_PROXY")
OPTS = {"proxy": PROXY} if PROXY else {}


def tag(label: str) -> str:
    return f"{label}-{os.getpid()}-{time.time_ns()}"


def eventually(fn, what: str, timeout: float = 10.0):
    """Retries fn until it stops raising (or timeout seconds pass)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - any failure retries
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: {err}") from err
            time.sleep(0.1)


async def eventually_async(fn, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await fn()
        except Exception as err:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: {err}") from err
            await asyncio.sleep(0.1)

