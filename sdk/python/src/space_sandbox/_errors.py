"""Errors: every non-2xx answer of the server is an APIError carrying the
body's ``code`` (the HTTP status) and ``message`` (a plain sentence)."""

from __future__ import annotations

import json
from typing import Optional


class SpaceError(Exception):
    """Base class of every error the SDK raises itself."""


class APIError(SpaceError):
    """A non-2xx answer. ``code`` is the API's code (the HTTP status),
    ``message`` its explanation."""

    def __init__(self, code: int, message: str, retry_after: Optional[str] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after = retry_after


class NotFoundError(APIError):
    """404: no such object (or one of another project: they look the same)."""


class ConflictError(APIError):
    """409: the object is in a state that refuses the call."""


class RateLimitError(APIError):
    """429: a quota or the in-flight limit refused the call."""


class StreamError(SpaceError):
    """An event stream could not be resumed (retries used up)."""


_BY_CODE = {404: NotFoundError, 409: ConflictError, 429: RateLimitError}

# Proxies can answer with whole HTML pages: keep the message readable.
_MAX_MESSAGE = 500


def error_from_response(status: int, body: bytes, retry_after: Optional[str]) -> APIError:
    code, message = status, ""
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            message = str(data.get("message") or "")
            if isinstance(data.get("code"), int):
                code = data["code"]
    except ValueError:
        pass
    if not message:
        text = body.decode("utf-8", "replace").strip()
        message = text if text and len(text) <= _MAX_MESSAGE else f"server answered {status}"
    return _BY_CODE.get(code, APIError)(code, message, retry_after)
