"""The asynchronous client. GENERATED from _client.py by scripts/gen_async.py: do not edit."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Union

import httpx

from ._base import MAX_STREAM_FAILURES, _Base, _drop_none, sandbox_body
from ._errors import StreamError
from ._sse import AttachDecoder, Event, LogDecoder, LogEvent, SSEParser
from ._types import (
    APIKey, ExecResult, FileEntry, FileList, MetricsList, Node, Project, Sandbox,
    SandboxEvent, Secret, Session, Snapshot, Template, Volume,
)

JSON = Dict[str, Any]


class AsyncClient(_Base):
    """A client of one space server. ``base_url`` defaults to $SPACE_URL,
    ``api_key`` to $SPACE_API_KEY. Use as a context manager or call close()."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: float = 120.0, transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout, read=None), transport=transport)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, req: httpx.Request) -> httpx.Response:
        return await self._http.send(req)

    async def _json(self, op: str, params: Optional[Mapping[str, str]] = None, key: Optional[str] = None, **kw: Any) -> Any:
        resp = await self._send(self._build(op, params, **kw))
        return self._decode(resp, key)

    # -- health ---------------------------------------------------------
    async def health(self) -> JSON:
        return await self._json("health")

    async def server_metrics(self) -> str:
        resp = await self._send(self._build("metrics"))
        self._check(resp)
        return resp.text

    # -- sandboxes ------------------------------------------------------
    async def create_sandbox(self, template: str = "base", **options: Any) -> Sandbox:
        """Create a sandbox (state ``starting``); options are the fields of
        CreateSandboxRequest: env, metadata, vcpus, memory_mb, disk_mb,
        timeout_s, network, volume_mounts, auto_resume, ... ``wait=True``
        waits until it runs."""
        wait = options.pop("wait", False)
        sb = await self._json("createSandbox", json_body=sandbox_body(template, **options))
        return await self.wait_sandbox(sb["id"], "running") if wait else sb

    async def list_sandboxes(self, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
                       project: Optional[str] = None) -> List[Sandbox]:
        query: Dict[str, Any] = {"state": state, "project": project}
        for k, v in sorted((metadata or {}).items()):
            query["metadata." + k] = v
        return await self._json("listSandboxes", key="sandboxes", query=query)

    async def get_sandbox(self, id: str) -> Sandbox:
        return await self._json("getSandbox", {"id": id})

    async def delete_sandbox(self, id: str) -> None:
        await self._json("deleteSandbox", {"id": id})

    async def wait_sandbox(self, id: str, state: str = "running", timeout_s: Optional[int] = None) -> Sandbox:
        return await self._json("waitSandbox", {"id": id}, query={"state": state, "timeout_s": timeout_s})

    async def set_timeout(self, id: str, timeout_s: int) -> Sandbox:
        return await self._json("setSandboxTimeout", {"id": id}, json_body={"timeout_s": timeout_s})

    async def set_network(self, id: str, policy: Mapping[str, Any]) -> Sandbox:
        """Replace the egress policy (mode, allow, deny, allow_internet, ...)."""
        return await self._json("setSandboxNetwork", {"id": id}, json_body=dict(policy))

    async def pause(self, id: str) -> Sandbox:
        return await self._json("pauseSandbox", {"id": id})

    async def resume(self, id: str) -> Sandbox:
        return await self._json("resumeSandbox", {"id": id})

    async def suspend(self, id: str, keep_memory: Optional[bool] = None) -> Sandbox:
        body = None if keep_memory is None else {"keep_memory": keep_memory}
        return await self._json("suspendSandbox", {"id": id}, json_body=body)

    async def branch(self, id: str, count: int = 1) -> List[Sandbox]:
        return await self._json("branchSandbox", {"id": id}, key="sandboxes", json_body={"count": count})

    async def create_snapshot(self, id: str, name: Optional[str] = None) -> Snapshot:
        return await self._json("createSnapshot", {"id": id}, json_body=_drop_none({"name": name}))

    async def list_snapshots(self, id: str) -> List[Snapshot]:
        return await self._json("listSnapshots", {"id": id}, key="snapshots")

    async def delete_snapshot(self, id: str, name: str) -> None:
        await self._json("deleteSnapshot", {"id": id, "name": name})

    async def restore(self, id: str, snapshot: str) -> Sandbox:
        return await self._json("restoreSandbox", {"id": id}, json_body={"snapshot": snapshot})

    async def sandbox_metrics(self, id: str, start: Optional[str] = None, end: Optional[str] = None) -> MetricsList:
        return await self._json("sandboxMetrics", {"id": id}, query={"start": start, "end": end})

    async def events(self, id: str) -> List[SandboxEvent]:
        return await self._json("listSandboxEvents", {"id": id}, key="events")

    async def network_denials(self, id: str) -> List[SandboxEvent]:
        """What the sandbox's egress policy refused (its ``network.denied``
        events, oldest first; the node rate-limits them per sandbox)."""
        evs = await self.events(id)
        return [e for e in evs if e.get("type") == "network.denied"]

    # -- exec and sessions ---------------------------------------------
    async def exec(self, id: str, cmd: List[str], *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             user: Optional[str] = None, timeout_s: Optional[int] = None) -> ExecResult:
        body = _drop_none({"cmd": cmd, "env": env, "cwd": cwd, "user": user, "timeout_s": timeout_s})
        return await self._json("exec", {"id": id}, json_body=body)

    async def create_session(self, id: str, cmd: List[str], *, env: Optional[Mapping[str, str]] = None,
                       cwd: Optional[str] = None, user: Optional[str] = None, tty: Optional[bool] = None,
                       stdin: Optional[bool] = None, cols: Optional[int] = None, rows: Optional[int] = None,
                       tag: Optional[str] = None) -> Session:
        """Start a session: it runs on when this client goes away; attach to
        it again from any client with its id and an offset."""
        body = _drop_none({"cmd": cmd, "env": env, "cwd": cwd, "user": user, "tty": tty,
                           "stdin": stdin, "cols": cols, "rows": rows, "tag": tag})
        return await self._json("createSession", {"id": id}, json_body=body)

    async def list_sessions(self, id: str) -> List[Session]:
        return await self._json("listSessions", {"id": id}, key="sessions")

    async def get_session(self, id: str, sid: str) -> Session:
        return await self._json("getSession", {"id": id, "sid": sid})

    async def write_stdin(self, id: str, sid: str, data: Union[bytes, str], close: bool = False) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await self._json("writeSessionStdin", {"id": id, "sid": sid}, query={"close": close or None}, content=raw)

    async def signal(self, id: str, sid: str, signal: str) -> None:
        await self._json("signalSession", {"id": id, "sid": sid}, json_body={"signal": signal})

    async def resize(self, id: str, sid: str, cols: int, rows: int) -> None:
        await self._json("resizeSession", {"id": id, "sid": sid}, json_body={"cols": cols, "rows": rows})

    def attach(self, id: str, sid: str, offset: int = 0) -> AsyncIterator[Event]:
        """Stream the session's output from ``offset`` up to its exit event.
        A dropped connection is reopened from the offset of the last byte
        delivered, so every byte arrives once; each Event's ``offset`` is
        where another attach would continue."""
        dec = AttachDecoder(offset)
        return self._events("attachSession", {"id": id, "sid": sid}, dec)

    def template_logs(self, name: str, start: int = 0) -> AsyncIterator[LogEvent]:
        """Stream a template's build log from line ``start``, ending with the
        ``done`` event (resumed like attach)."""
        return self._events("streamTemplateLogs", {"name": name}, LogDecoder(start))

    async def _events(self, op: str, params: Mapping[str, str], dec: Any) -> AsyncIterator[Any]:
        first, failures = True, 0
        parser = SSEParser()
        while not dec.exited:
            query, headers = dec.request(first)
            headers = dict(headers, Accept="text/event-stream")
            try:
                resp = await self._send_stream(self._build(op, params, query=query, headers=headers))
                try:
                    if resp.status_code >= 400:
                        self._stream_ok(resp, await self._read_all(resp))
                    first = False
                    parser = SSEParser()
                    async for chunk in self._iter(resp):
                        for raw in parser.feed(chunk):
                            ev = dec.decode(raw)
                            failures = 0
                            if ev is not None:
                                yield ev
                            if dec.exited:
                                return
                finally:
                    await self._close(resp)
            except (httpx.TransportError, httpx.StreamError) as err:
                if first:
                    raise
                last: Exception = err
            else:
                last = StreamError("event stream ended before its last event")
            failures += 1
            if failures > MAX_STREAM_FAILURES:
                raise StreamError(f"{op}: reconnecting failed {failures - 1} times: {last}")
            await self._sleep(self._backoff(failures, parser.retry_ms))

    async def _send_stream(self, req: httpx.Request) -> httpx.Response:
        return await self._http.send(req, stream=True)

    async def _read_all(self, resp: httpx.Response) -> bytes:
        return await resp.aread()

    def _iter(self, resp: httpx.Response) -> AsyncIterator[bytes]:
        return resp.aiter_raw()

    async def _close(self, resp: httpx.Response) -> None:
        await resp.aclose()

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    # -- files ------------------------------------------------------------
    async def read_file(self, id: str, path: str, *, snapshot: Optional[str] = None) -> bytes:
        resp = await self._send(self._build("readFile", {"id": id}, query={"path": path, "snapshot": snapshot}))
        got = self._listing_or_bytes(resp)
        if not isinstance(got, bytes):
            raise IsADirectoryError(path)
        return got

    async def list_dir(self, id: str, path: str, *, depth: Optional[int] = None, limit: Optional[int] = None,
                 cursor: Optional[str] = None, snapshot: Optional[str] = None) -> FileList:
        query = {"path": path, "depth": depth or 1, "limit": limit, "cursor": cursor, "snapshot": snapshot}
        return await self._json("readFile", {"id": id}, query=query, headers={"Accept": "application/json"})

    async def write_file(self, id: str, path: str, data: Union[bytes, str]) -> FileEntry:
        raw = data.encode() if isinstance(data, str) else data
        return await self._json("writeFile", {"id": id}, query={"path": path}, content=raw)

    async def remove_file(self, id: str, path: str) -> None:
        await self._json("removeFile", {"id": id}, query={"path": path})

    async def mkdir(self, id: str, path: str) -> FileEntry:
        return await self._json("makeDirectory", {"id": id}, json_body={"path": path})

    async def move(self, id: str, src: str, dst: str) -> FileEntry:
        return await self._json("moveFile", {"id": id}, json_body={"from": src, "to": dst})

    # -- templates and pools ---------------------------------------------
    async def create_template(self, recipe: str, name: Optional[str] = None) -> Template:
        """Build a template from a recipe (YAML text); follow the build with
        template_logs(name)."""
        return await self._json("createTemplate", json_body=_drop_none({"name": name, "recipe": recipe}))

    async def list_templates(self, project: Optional[str] = None) -> List[Template]:
        return await self._json("listTemplates", key="templates", query={"project": project})

    async def get_template(self, name: str, logs_from: Optional[int] = None) -> Template:
        return await self._json("getTemplate", {"name": name}, query={"logs_from": logs_from})

    async def delete_template(self, name: str) -> None:
        await self._json("deleteTemplate", {"name": name})

    async def set_pool(self, name: str, size: int) -> Template:
        return await self._json("setTemplatePool", {"name": name}, json_body={"size": size})

    # -- volumes ------------------------------------------------------------
    async def create_volume(self, name: str, size_mb: Optional[int] = None) -> Volume:
        return await self._json("createVolume", json_body=_drop_none({"name": name, "size_mb": size_mb}))

    async def list_volumes(self, project: Optional[str] = None) -> List[Volume]:
        return await self._json("listVolumes", key="volumes", query={"project": project})

    async def get_volume(self, id: str) -> Volume:
        return await self._json("getVolume", {"id": id})

    async def delete_volume(self, id: str) -> None:
        await self._json("deleteVolume", {"id": id})

    async def read_volume_file(self, id: str, path: str) -> bytes:
        got = self._listing_or_bytes(await self._send(self._build("readVolumeFile", {"id": id}, query={"path": path})))
        if not isinstance(got, bytes):
            raise IsADirectoryError(path)
        return got

    async def list_volume_dir(self, id: str, path: str = "/", *, depth: Optional[int] = None,
                        limit: Optional[int] = None, cursor: Optional[str] = None) -> FileList:
        query = {"path": path, "depth": depth or 1, "limit": limit, "cursor": cursor}
        return await self._json("readVolumeFile", {"id": id}, query=query, headers={"Accept": "application/json"})

    async def write_volume_file(self, id: str, path: str, data: Union[bytes, str]) -> FileEntry:
        raw = data.encode() if isinstance(data, str) else data
        return await self._json("writeVolumeFile", {"id": id}, query={"path": path}, content=raw)

    async def remove_volume_file(self, id: str, path: str) -> None:
        await self._json("removeVolumeFile", {"id": id}, query={"path": path})

    async def mkdir_volume(self, id: str, path: str) -> FileEntry:
        return await self._json("mkdirVolume", {"id": id}, json_body={"path": path})

    # -- keys, secrets, projects -----------------------------------------
    async def create_key(self, name: str, project: Optional[str] = None, admin: Optional[bool] = None) -> APIKey:
        return await self._json("createKey", json_body=_drop_none({"name": name, "project": project, "admin": admin}))

    async def list_keys(self, project: Optional[str] = None) -> List[APIKey]:
        return await self._json("listKeys", key="keys", query={"project": project})

    async def revoke_key(self, id: str) -> None:
        await self._json("revokeKey", {"id": id})

    async def set_secret(self, name: str, value: str, project: Optional[str] = None) -> Secret:
        return await self._json("setSecret", json_body=_drop_none({"name": name, "value": value, "project": project}))

    async def list_secrets(self, project: Optional[str] = None) -> List[Secret]:
        return await self._json("listSecrets", key="secrets", query={"project": project})

    async def delete_secret(self, name: str, project: Optional[str] = None) -> None:
        await self._json("deleteSecret", {"name": name}, query={"project": project})

    async def list_projects(self) -> List[Project]:
        return await self._json("listProjects", key="projects")

    async def get_project(self, name: str) -> Project:
        return await self._json("getProject", {"name": name})

    async def set_project(self, name: str, **quota: Any) -> Project:
        """Replace a project's quota settings (max_sandboxes, max_memory_mb,
        max_snapshots, creates_per_second, max_volume_mb; left out = default)."""
        return await self._json("setProject", {"name": name}, json_body=_drop_none(quota))

    # -- nodes --------------------------------------------------------------
    async def list_nodes(self) -> List[Node]:
        return await self._json("listNodes", key="nodes")

    async def get_node(self, id: str) -> Node:
        return await self._json("getNode", {"id": id})

    async def remove_node(self, id: str, force: bool = False) -> Optional[Node]:
        return await self._json("removeNode", {"id": id}, query={"force": force or None})

    async def cordon_node(self, id: str) -> Node:
        return await self._json("cordonNode", {"id": id})

    async def uncordon_node(self, id: str) -> Node:
        return await self._json("uncordonNode", {"id": id})

    async def drain_node(self, id: str) -> Node:
        return await self._json("drainNode", {"id": id})
