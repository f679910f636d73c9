"""The API's objects as TypedDicts (the JSON the server sends, unchanged).
Fields are those of docs/openapi.yaml; a newer server may add more."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict


class Sandbox(TypedDict, total=False):
    id: str
    template: str
    state: str
    vcpus: int
    memory_mb: int
    disk_mb: int
    env: Dict[str, str]
    metadata: Dict[str, str]
    network: Dict[str, Any]
    volume_mounts: List[Dict[str, Any]]
    access_token: str
    created_at: str
    expires_at: str
    branch_of: str
    node: str
    error: str


class Session(TypedDict, total=False):
    id: str
    pid: int
    cmd: List[str]
    tag: str
    tty: bool
    state: str
    exit_code: Optional[int]
    error: str
    started_at: str
    ended_at: str
    output_bytes: int


class ExecResult(TypedDict, total=False):
    stdout: str
    stderr: str
    exit_code: int
    output_truncated: bool


class FileEntry(TypedDict, total=False):
    name: str
    path: str
    type: str
    size: int
    mode: int
    owner: str
    group: str
    modified_at: str
    symlink_target: str


class FileList(TypedDict, total=False):
    entries: List[FileEntry]
    next_cursor: str


class Template(TypedDict, total=False):
    name: str
    state: str
    error: str
    logs: List[str]
    builtin: bool
    sandboxes: int
    pool: Dict[str, Any]
    created_at: str
    ready_at: str


class Volume(TypedDict, total=False):
    id: str
    name: str
    project: str
    size_mb: int
    used_bytes: int
    node: str
    mounted_by: List[str]
    created_at: str


class Snapshot(TypedDict, total=False):
    id: str
    name: str
    sandbox_id: str
    size_bytes: int
    created_at: str


class SandboxEvent(TypedDict, total=False):
    time: str
    type: str
    from_: str  # "from" in the JSON (a keyword in Python): get("from")
    to: str
    message: str


class MetricsList(TypedDict, total=False):
    metrics: List[Dict[str, Any]]


class APIKey(TypedDict, total=False):
    id: str
    name: str
    prefix: str
    admin: bool
    project: str
    created_at: str
    key: str


class Secret(TypedDict, total=False):
    name: str
    project: str
    created_at: str
    updated_at: str


class Project(TypedDict, total=False):
    name: str
    quota: Dict[str, Any]
    settings: Dict[str, Any]
    usage: Dict[str, Any]


class Node(TypedDict, total=False):
    id: str
    address: str
    state: str
    vcpus: int
    memory_mb: int
    sandboxes: int
    templates: List[str]
    last_heartbeat: str
    registered_at: str
