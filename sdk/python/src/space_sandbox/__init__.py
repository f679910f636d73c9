"""space-sandbox: the Python SDK of space's own API (docs/api.md).

    from space_sandbox import Client
    with Client("http://127.0.0.1:7070", api_key="sk_...") as c:
        sb = c.create_sandbox("base", wait=True)
        print(c.exec(sb["id"], ["echo", "hi"])["stdout"])

AsyncClient has the same methods, awaited.
"""

from ._async import AsyncClient
from ._client import Client
from ._errors import APIError, ConflictError, NotFoundError, RateLimitError, SpaceError, StreamError
from ._ops import OPERATIONS, Operation
from ._sse import Event, LogEvent
from ._version import __version__

__all__ = [
    "APIError", "AsyncClient", "Client", "ConflictError", "Event", "LogEvent", "NotFoundError",
    "OPERATIONS", "Operation", "RateLimitError", "SpaceError", "StreamError", "__version__",
]
