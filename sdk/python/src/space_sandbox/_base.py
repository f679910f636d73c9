"""What the sync and async clients share: configuration, building each
request from the mapping table, and decoding answers."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

import httpx

from ._errors import error_from_response
from ._ops import OPERATIONS
from ._version import __version__

Query = Dict[str, Union[str, int, bool, None]]

# Reconnects of an event stream that delivered nothing in between before
# giving up; the delay doubles from 0.25 s up to 5 s (or the server's retry:).
MAX_STREAM_FAILURES = 8


def _q(query: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for k, v in (query or {}).items():
        if v is None or v == "":
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _drop_none(body: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


class _Base:
    def __init__(self, base_url: Optional[str], api_key: Optional[str], timeout: float) -> None:
        base_url = base_url or os.environ.get("SPACE_URL") or "http://127.0.0.1:7070"
        api_key = api_key if api_key is not None else os.environ.get("SPACE_API_KEY", "")
        self.base_url = base_url.rstrip("/")
        self._headers = {"User-Agent": f"space-sandbox-python/{__version__}"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = timeout

    def _build(
        self,
        op: str,
        params: Optional[Mapping[str, str]] = None,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        content: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> httpx.Request:
        method, path, _ = OPERATIONS[op]
        for name, value in (params or {}).items():
            if not value:
                raise ValueError(f"{op}: {name} must not be empty")
            path = path.replace("{" + name + "}", quote(str(value), safe=""))
        h = dict(self._headers)
        h.update(headers or {})
        body: Optional[bytes] = content
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        elif content is not None:
            h.setdefault("Content-Type", "application/octet-stream")
        return httpx.Request(method, self.base_url + path, params=_q(query), content=body, headers=h)

    @staticmethod
    def _check(resp: httpx.Response) -> None:
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, resp.content, resp.headers.get("Retry-After"))

    @staticmethod
    def _decode(resp: httpx.Response, key: Optional[str] = None) -> Any:
        _Base._check(resp)
        if resp.status_code == 204 or not resp.content:
            return None
        data = resp.json()
        return data.get(key, []) if key else data

    @staticmethod
    def _listing_or_bytes(resp: httpx.Response) -> Any:
        _Base._check(resp)
        if resp.headers.get("Content-Type", "").startswith("application/json"):
            return resp.json()
        return resp.content

    @staticmethod
    def _stream_ok(resp: httpx.Response, body: bytes) -> None:
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, body, resp.headers.get("Retry-After"))

    @staticmethod
    def _backoff(failures: int, retry_ms: Optional[int]) -> float:
        if retry_ms is not None:
            return retry_ms / 1000
        return min(5.0, 0.25 * (2 ** (failures - 1)))


def sandbox_body(
    template: str,
    *,
    env: Optional[Mapping[str, str]] = None,
    metadata: Optional[Mapping[str, str]] = None,
    vcpus: Optional[int] = None,
    memory_mb: Optional[int] = None,
    disk_mb: Optional[int] = None,
    timeout_s: Optional[int] = None,
    network: Optional[Mapping[str, Any]] = None,
    volume_mounts: Optional[List[Dict[str, Any]]] = None,
    on_timeout: Optional[str] = None,
    auto_resume: Optional[bool] = None,
    idle_suspend_s: Optional[int] = None,
    keep_memory: Optional[bool] = None,
    credentials: Optional[List[Dict[str, Any]]] = None,
    snapshot: Optional[str] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    body = _drop_none({
        "template": template, "env": env, "metadata": metadata, "vcpus": vcpus,
        "memory_mb": memory_mb, "disk_mb": disk_mb, "timeout_s": timeout_s,
        "network": network, "volume_mounts": volume_mounts, "on_timeout": on_timeout,
        "auto_resume": auto_resume, "idle_suspend_s": idle_suspend_s,
        "keep_memory": keep_memory, "credentials": credentials, "snapshot": snapshot,
    })
    body.update(extra or {})
    return body
