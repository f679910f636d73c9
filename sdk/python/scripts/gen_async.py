"""Writes src/space_sandbox/_async.py from _client.py: the async client is
the sync one with every call to the server awaited. One source keeps the two
clients from drifting; tests/test_spec.py fails when _async.py is stale.

    python scripts/gen_async.py          # rewrite
    python scripts/gen_async.py --check  # exit 1 when stale
"""

from __future__ import annotations

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent.parent / "src" / "space_sandbox"

# Calls that reach the network (or sleep) become awaits.
AWAITED = ["_send_stream", "_send", "_json", "_read_all", "_close", "_sleep", "wait_sandbox", "events", "_http.send", "_http.aclose"]


def generate(src: str) -> str:
    out = src.replace('"""The synchronous client. _async.py is generated from this file by\nscripts/gen_async.py (tests/test_spec.py checks it is up to date): edit here."""',
                      '"""The asynchronous client. GENERATED from _client.py by scripts/gen_async.py: do not edit."""')
    out = out.replace("import time\n", "import asyncio\n")
    out = out.replace("from typing import Any, Dict, Iterator,", "from typing import Any, AsyncIterator, Dict,")
    out = out.replace("class Client(_Base):", "class AsyncClient(_Base):")
    out = out.replace('"Client"', '"AsyncClient"')
    out = out.replace("httpx.Client(", "httpx.AsyncClient(")
    out = out.replace("httpx.BaseTransport", "httpx.AsyncBaseTransport")
    out = out.replace("self._http.close()", "await self._http.aclose()")
    out = out.replace("def __enter__", "async def __aenter__").replace("def __exit__", "async def __aexit__")
    out = out.replace("self.close()", "await self.close()")
    out = out.replace("time.sleep(", "await asyncio.sleep(")
    out = out.replace("resp.read()", "await resp.aread()").replace("resp.close()", "await resp.aclose()")
    out = out.replace("resp.iter_raw()", "resp.aiter_raw()")
    out = out.replace("for chunk in self._iter(resp):", "async for chunk in self._iter(resp):")
    out = out.replace("Iterator[", "AsyncIterator[")
    # every method that is not a generator-returning one becomes async
    out = re.sub(r"(\n    )def (?!__init__|_iter|attach|template_logs|__aenter__|__aexit__)", r"\1async def ", out)
    out = out.replace("async def __aenter__", "async def __aenter__")
    out = out.replace("    def __aenter__", "    async def __aenter__").replace("    def __aexit__", "    async def __aexit__")
    out = out.replace("async async def", "async def")
    for name in AWAITED:
        out = re.sub(r"(return |= |\(|, |^\s+)(?<![\w.])self\." + re.escape(name) + r"\(",
                     lambda m: m.group(1) + "await self." + name + "(", out, flags=re.M)
    out = out.replace("await await", "await")
    out = out.replace("async def _events", "async def _events")
    return out


def main() -> int:
    src = (HERE / "_client.py").read_text()
    want = generate(src)
    target = HERE / "_async.py"
    if "--check" in sys.argv:
        if not target.exists() or target.read_text() != want:
            print("_async.py is stale: run python scripts/gen_async.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
