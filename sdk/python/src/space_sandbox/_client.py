"""The synchronous client. _async.py is generated from this file by
scripts/gen_async.py (tests/test_spec.py checks it is up to date): edit here."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

import httpx

from ._base import MAX_STREAM_FAILURES, _Base, _drop_none, sandbox_body
from ._errors import StreamError
from ._sse import AttachDecoder, Event, LogDecoder, LogEvent, SSEParser
from ._types import (
    APIKey, ExecResult, FileEntry, FileList, MetricsList, Node, Project, Sandbox,
    SandboxEvent, Secret, Session, Snapshot, Template, Volume,
)

JSON = Dict[str, Any]


class Client(_Base):
    """A client of one space server. ``base_url`` defaults to $SPACE_URL,
    ``api_key`` to $SPACE_API_KEY. Use as a context manager or call close()."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: float = 120.0, transport: Optional[httpx.BaseTransport] = None) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, read=None), transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, req: httpx.Request) -> httpx.Response:
        return self._http.send(req)

    def _json(self, op: str, params: Optional[Mapping[str, str]] = None, key: Optional[str] = None, **kw: Any) -> Any:
        resp = self._send(self._build(op, params, **kw))
        return self._decode(resp, key)

    # -- health ---------------------------------------------------------
    def health(self) -> JSON:
        return self._json("health")

    def server_metrics(self) -> str:
        resp = self._send(self._build("metrics"))
        self._check(resp)
        return resp.text

    # -- sandboxes ------------------------------------------------------
    def create_sandbox(self, template: str = "base", **options: Any) -> Sandbox:
        """Create a sandbox (state ``starting``); options are the fields of
        CreateSandboxRequest: env, metadata, vcpus, memory_mb, disk_mb,
        timeout_s, network, volume_mounts, auto_resume, ... ``wait=True``
        waits until it runs."""
        wait = options.pop("wait", False)
        sb = self._json("createSandbox", json_body=sandbox_body(template, **options))
        return self.wait_sandbox(sb["id"], "running") if wait else sb

    def list_sandboxes(self, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
                       project: Optional[str] = None) -> List[Sandbox]:
        query: Dict[str, Any] = {"state": state, "project": project}
        for k, v in sorted((metadata or {}).items()):
            query["metadata." + k] = v
        return self._json("listSandboxes", key="sandboxes", query=query)

    def get_sandbox(self, id: str) -> Sandbox:
        return self._json("getSandbox", {"id": id})

    def delete_sandbox(self, id: str) -> None:
        self._json("deleteSandbox", {"id": id})

    def wait_sandbox(self, id: str, state: str = "running", timeout_s: Optional[int] = None) -> Sandbox:
        return self._json("waitSandbox", {"id": id}, query={"state": state, "timeout_s": timeout_s})

    def set_timeout(self, id: str, timeout_s: int) -> Sandbox:
        return self._json("setSandboxTimeout", {"id": id}, json_body={"timeout_s": timeout_s})

    def set_network(self, id: str, policy: Mapping[str, Any]) -> Sandbox:
        """Replace the egress policy (mode, allow, deny, allow_internet, ...)."""
        return self._json("setSandboxNetwork", {"id": id}, json_body=dict(policy))

    def pause(self, id: str) -> Sandbox:
        return self._json("pauseSandbox", {"id": id})

    def resume(self, id: str) -> Sandbox:
        return self._json("resumeSandbox", {"id": id})

    def suspend(self, id: str, keep_memory: Optional[bool] = None) -> Sandbox:
        body = None if keep_memory is None else {"keep_memory": keep_memory}
        return self._json("suspendSandbox", {"id": id}, json_body=body)

    def branch(self, id: str, count: int = 1) -> List[Sandbox]:
        return self._json("branchSandbox", {"id": id}, key="sandboxes", json_body={"count": count})

    def create_snapshot(self, id: str, name: Optional[str] = None) -> Snapshot:
        return self._json("createSnapshot", {"id": id}, json_body=_drop_none({"name": name}))

    def list_snapshots(self, id: str) -> List[Snapshot]:
        return self._json("listSnapshots", {"id": id}, key="snapshots")

    def delete_snapshot(self, id: str, name: str) -> None:
        self._json("deleteSnapshot", {"id": id, "name": name})

    def restore(self, id: str, snapshot: str) -> Sandbox:
        return self._json("restoreSandbox", {"id": id}, json_body={"snapshot": snapshot})

    def sandbox_metrics(self, id: str, start: Optional[str] = None, end: Optional[str] = None) -> MetricsList:
        return self._json("sandboxMetrics", {"id": id}, query={"start": start, "end": end})

    def events(self, id: str) -> List[SandboxEvent]:
        return self._json("listSandboxEvents", {"id": id}, key="events")

    def network_denials(self, id: str) -> List[SandboxEvent]:
        """What the sandbox's egress policy refused (its ``network.denied``
        events, oldest first; the node rate-limits them per sandbox)."""
        evs = self.events(id)
        return [e for e in evs if e.get("type") == "network.denied"]

    # -- exec and sessions ---------------------------------------------
    def exec(self, id: str, cmd: List[str], *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             user: Optional[str] = None, timeout_s: Optional[int] = None) -> ExecResult:
        body = _drop_none({"cmd": cmd, "env": env, "cwd": cwd, "user": user, "timeout_s": timeout_s})
        return self._json("exec", {"id": id}, json_body=body)

    def create_session(self, id: str, cmd: List[str], *, env: Optional[Mapping[str, str]] = None,
                       cwd: Optional[str] = None, user: Optional[str] = None, tty: Optional[bool] = None,
                       stdin: Optional[bool] = None, cols: Optional[int] = None, rows: Optional[int] = None,
                       tag: Optional[str] = None) -> Session:
        """Start a session: it runs on when this client goes away; attach to
        it again from any client with its id and an offset."""
        body = _drop_none({"cmd": cmd, "env": env, "cwd": cwd, "user": user, "tty": tty,
                           "stdin": stdin, "cols": cols, "rows": rows, "tag": tag})
        return self._json("createSession", {"id": id}, json_body=body)

    def list_sessions(self, id: str) -> List[Session]:
        return self._json("listSessions", {"id": id}, key="sessions")

    def get_session(self, id: str, sid: str) -> Session:
        return self._json("getSession", {"id": id, "sid": sid})

    def write_stdin(self, id: str, sid: str, data: Union[bytes, str], close: bool = False) -> None:
        raw = data.encode() if isinstance(data, str) else data
        self._json("writeSessionStdin", {"id": id, "sid": sid}, query={"close": close or None}, content=raw)

    def signal(self, id: str, sid: str, signal: str) -> None:
        self._json("signalSession", {"id": id, "sid": sid}, json_body={"signal": signal})

    def resize(self, id: str, sid: str, cols: int, rows: int) -> None:
        self._json("resizeSession", {"id": id, "sid": sid}, json_body={"cols": cols, "rows": rows})

    def attach(self, id: str, sid: str, offset: int = 0) -> Iterator[Event]:
        """Stream the session's output from ``offset`` up to its exit event.
        A dropped connection is reopened from the offset of the last byte
        delivered, so every byte arrives once; each Event's ``offset`` is
        where another attach would continue."""
        dec = AttachDecoder(offset)
        return self._events("attachSession", {"id": id, "sid": sid}, dec)

    def template_logs(self, name: str, start: int = 0) -> Iterator[LogEvent]:
        """Stream a template's build log from line ``start``, ending with the
        ``done`` event (resumed like attach)."""
        return self._events("streamTemplateLogs", {"name": name}, LogDecoder(start))

    def _events(self, op: str, params: Mapping[str, str], dec: Any) -> Iterator[Any]:
        first, failures = True, 0
        parser = SSEParser()
        while not dec.exited:
            query, headers = dec.request(first)
            headers = dict(headers, Accept="text/event-stream")
            try:
                resp = self._send_stream(self._build(op, params, query=query, headers=headers))
                try:
                    if resp.status_code >= 400:
                        self._stream_ok(resp, self._read_all(resp))
                    first = False
                    parser = SSEParser()
                    for chunk in self._iter(resp):
                        for raw in parser.feed(chunk):
                            ev = dec.decode(raw)
                            failures = 0
                            if ev is not None:
                                yield ev
                            if dec.exited:
                                return
                finally:
                    self._close(resp)
            except (httpx.TransportError, httpx.StreamError) as err:
                if first:
                    raise
                last: Exception = err
            else:
                last = StreamError("event stream ended before its last event")
            failures += 1
            if failures > MAX_STREAM_FAILURES:
                raise StreamError(f"{op}: reconnecting failed {failures - 1} times: {last}")
            self._sleep(self._backoff(failures, parser.retry_ms))

    def _send_stream(self, req: httpx.Request) -> httpx.Response:
        return self._http.send(req, stream=True)

    def _read_all(self, resp: httpx.Response) -> bytes:
        return resp.read()

    def _iter(self, resp: httpx.Response) -> Iterator[bytes]:
        return resp.iter_raw()

    def _close(self, resp: httpx.Response) -> None:
        resp.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    # -- files ------------------------------------------------------------
    def read_file(self, id: str, path: str, *, snapshot: Optional[str] = None) -> bytes:
        resp = self._send(self._build("readFile", {"id": id}, query={"path": path, "snapshot": snapshot}))
        got = self._listing_or_bytes(resp)
        if not isinstance(got, bytes):
            raise IsADirectoryError(path)
        return got

    def list_dir(self, id: str, path: str, *, depth: Optional[int] = None, limit: Optional[int] = None,
                 cursor: Optional[str] = None, snapshot: Optional[str] = None) -> FileList:
        query = {"path": path, "depth": depth or 1, "limit": limit, "cursor": cursor, "snapshot": snapshot}
        return self._json("readFile", {"id": id}, query=query, headers={"Accept": "application/json"})

    def write_file(self, id: str, path: str, data: Union[bytes, str]) -> FileEntry:
        raw = data.encode() if isinstance(data, str) else data
        return self._json("writeFile", {"id": id}, query={"path": path}, content=raw)

    def remove_file(self, id: str, path: str) -> None:
        self._json("removeFile", {"id": id}, query={"path": path})

    def mkdir(self, id: str, path: str) -> FileEntry:
        return self._json("makeDirectory", {"id": id}, json_body={"path": path})

    def move(self, id: str, src: str, dst: str) -> FileEntry:
        return self._json("moveFile", {"id": id}, json_body={"from": src, "to": dst})

    # -- templates and pools ---------------------------------------------
    def create_template(self, recipe: str, name: Optional[str] = None) -> Template:
        """Build a template from a recipe (YAML text); follow the build with
        template_logs(name)."""
        return self._json("createTemplate", json_body=_drop_none({"name": name, "recipe": recipe}))

    def list_templates(self, project: Optional[str] = None) -> List[Template]:
        return self._json("listTemplates", key="templates", query={"project": project})

    def get_template(self, name: str, logs_from: Optional[int] = None) -> Template:
        return self._json("getTemplate", {"name": name}, query={"logs_from": logs_from})

    def delete_template(self, name: str) -> None:
        self._json("deleteTemplate", {"name": name})

    def set_pool(self, name: str, size: int) -> Template:
        return self._json("setTemplatePool", {"name": name}, json_body={"size": size})

    # -- volumes ------------------------------------------------------------
    def create_volume(self, name: str, size_mb: Optional[int] = None) -> Volume:
        return self._json("createVolume", json_body=_drop_none({"name": name, "size_mb": size_mb}))

    def list_volumes(self, project: Optional[str] = None) -> List[Volume]:
        return self._json("listVolumes", key="volumes", query={"project": project})

    def get_volume(self, id: str) -> Volume:
        return self._json("getVolume", {"id": id})

    def delete_volume(self, id: str) -> None:
        self._json("deleteVolume", {"id": id})

    def read_volume_file(self, id: str, path: str) -> bytes:
        got = self._listing_or_bytes(self._send(self._build("readVolumeFile", {"id": id}, query={"path": path})))
        if not isinstance(got, bytes):
            raise IsADirectoryError(path)
        return got

    def list_volume_dir(self, id: str, path: str = "/", *, depth: Optional[int] = None,
                        limit: Optional[int] = None, cursor: Optional[str] = None) -> FileList:
        query = {"path": path, "depth": depth or 1, "limit": limit, "cursor": cursor}
        return self._json("readVolumeFile", {"id": id}, query=query, headers={"Accept": "application/json"})

    def write_volume_file(self, id: str, path: str, data: Union[bytes, str]) -> FileEntry:
        raw = data.encode() if isinstance(data, str) else data
        return self._json("writeVolumeFile", {"id": id}, query={"path": path}, content=raw)

    def remove_volume_file(self, id: str, path: str) -> None:
        self._json("removeVolumeFile", {"id": id}, query={"path": path})

    def mkdir_volume(self, id: str, path: str) -> FileEntry:
        return self._json("mkdirVolume", {"id": id}, json_body={"path": path})

    # -- keys, secrets, projects -----------------------------------------
    def create_key(self, name: str, project: Optional[str] = None, admin: Optional[bool] = None) -> APIKey:
        return self._json("createKey", json_body=_drop_none({"name": name, "project": project, "admin": admin}))

    def list_keys(self, project: Optional[str] = None) -> List[APIKey]:
        return self._json("listKeys", key="keys", query={"project": project})

    def revoke_key(self, id: str) -> None:
        self._json("revokeKey", {"id": id})

    def set_secret(self, name: str, value: str, project: Optional[str] = None) -> Secret:
        return self._json("setSecret", json_body=_drop_none({"name": name, "value": value, "project": project}))

    def list_secrets(self, project: Optional[str] = None) -> List[Secret]:
        return self._json("listSecrets", key="secrets", query={"project": project})

    def delete_secret(self, name: str, project: Optional[str] = None) -> None:
        self._json("deleteSecret", {"name": name}, query={"project": project})

    def list_projects(self) -> List[Project]:
        return self._json("listProjects", key="projects")

    def get_project(self, name: str) -> Project:
        return self._json("getProject", {"name": name})

    def set_project(self, name: str, **quota: Any) -> Project:
        """Replace a project's quota settings (max_sandboxes, max_memory_mb,
        max_snapshots, creates_per_second, max_volume_mb; left out = default)."""
        return self._json("setProject", {"name": name}, json_body=_drop_none(quota))

    # -- nodes --------------------------------------------------------------
    def list_nodes(self) -> List[Node]:
        return self._json("listNodes", key="nodes")

    def get_node(self, id: str) -> Node:
        return self._json("getNode", {"id": id})

    def remove_node(self, id: str, force: bool = False) -> Optional[Node]:
        return self._json("removeNode", {"id": id}, query={"force": force or None})

    def cordon_node(self, id: str) -> Node:
        return self._json("cordonNode", {"id": id})

    def uncordon_node(self, id: str) -> Node:
        return self._json("uncordonNode", {"id": id})

    def drain_node(self, id: str) -> Node:
        return self._json("drainNode", {"id": id})
