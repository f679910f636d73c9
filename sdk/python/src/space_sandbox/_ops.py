"""The mapping table: every operation of docs/openapi.yaml, by operationId,
with its method, path template and the SDK method that calls it.

tests/test_spec.py fails when the spec has an operation (method + path) that
is missing here, or when a method named here is missing from Client or
AsyncClient: a route added to the server without an SDK method breaks the
build of the SDK, not its users.
"""

from __future__ import annotations

from typing import Dict, NamedTuple


class Operation(NamedTuple):
    method: str
    path: str
    sdk_method: str


OPERATIONS: Dict[str, Operation] = {
    "health": Operation("GET", "/healthz", "health"),
    "metrics": Operation("GET", "/metrics", "server_metrics"),
    # sandboxes
    "createSandbox": Operation("POST", "/v1/sandboxes", "create_sandbox"),
    "listSandboxes": Operation("GET", "/v1/sandboxes", "list_sandboxes"),
    "getSandbox": Operation("GET", "/v1/sandboxes/{id}", "get_sandbox"),
    "deleteSandbox": Operation("DELETE", "/v1/sandboxes/{id}", "delete_sandbox"),
    "waitSandbox": Operation("GET", "/v1/sandboxes/{id}/wait", "wait_sandbox"),
    "setSandboxTimeout": Operation("POST", "/v1/sandboxes/{id}/timeout", "set_timeout"),
    "setSandboxNetwork": Operation("PUT", "/v1/sandboxes/{id}/network", "set_network"),
    # exec and sessions
    "exec": Operation("POST", "/v1/sandboxes/{id}/exec", "exec"),
    "createSession": Operation("POST", "/v1/sandboxes/{id}/sessions", "create_session"),
    "listSessions": Operation("GET", "/v1/sandboxes/{id}/sessions", "list_sessions"),
    "getSession": Operation("GET", "/v1/sandboxes/{id}/sessions/{sid}", "get_session"),
    "attachSession": Operation("GET", "/v1/sandboxes/{id}/sessions/{sid}/attach", "attach"),
    "writeSessionStdin": Operation("POST", "/v1/sandboxes/{id}/sessions/{sid}/stdin", "write_stdin"),
    "signalSession": Operation("POST", "/v1/sandboxes/{id}/sessions/{sid}/signal", "signal"),
    "resizeSession": Operation("POST", "/v1/sandboxes/{id}/sessions/{sid}/resize", "resize"),
    # files
    "readFile": Operation("GET", "/v1/sandboxes/{id}/files", "read_file"),
    "writeFile": Operation("PUT", "/v1/sandboxes/{id}/files", "write_file"),
    "removeFile": Operation("DELETE", "/v1/sandboxes/{id}/files", "remove_file"),
    "makeDirectory": Operation("POST", "/v1/sandboxes/{id}/files/mkdir", "mkdir"),
    "moveFile": Operation("POST", "/v1/sandboxes/{id}/files/move", "move"),
    # templates and pools
    "createTemplate": Operation("POST", "/v1/templates", "create_template"),
    "listTemplates": Operation("GET", "/v1/templates", "list_templates"),
    "getTemplate": Operation("GET", "/v1/templates/{name}", "get_template"),
    "deleteTemplate": Operation("DELETE", "/v1/templates/{name}", "delete_template"),
    "setTemplatePool": Operation("PUT", "/v1/templates/{name}/pool", "set_pool"),
    "streamTemplateLogs": Operation("GET", "/v1/templates/{name}/logs", "template_logs"),
    # volumes
    "createVolume": Operation("POST", "/v1/volumes", "create_volume"),
    "listVolumes": Operation("GET", "/v1/volumes", "list_volumes"),
    "getVolume": Operation("GET", "/v1/volumes/{id}", "get_volume"),
    "deleteVolume": Operation("DELETE", "/v1/volumes/{id}", "delete_volume"),
    "readVolumeFile": Operation("GET", "/v1/volumes/{id}/files", "read_volume_file"),
    "writeVolumeFile": Operation("PUT", "/v1/volumes/{id}/files", "write_volume_file"),
    "removeVolumeFile": Operation("DELETE", "/v1/volumes/{id}/files", "remove_volume_file"),
    "mkdirVolume": Operation("POST", "/v1/volumes/{id}/files/mkdir", "mkdir_volume"),
    # keys, secrets, projects
    "createKey": Operation("POST", "/v1/keys", "create_key"),
    "listKeys": Operation("GET", "/v1/keys", "list_keys"),
    "revokeKey": Operation("DELETE", "/v1/keys/{id}", "revoke_key"),
    "setSecret": Operation("POST", "/v1/secrets", "set_secret"),
    "listSecrets": Operation("GET", "/v1/secrets", "list_secrets"),
    "deleteSecret": Operation("DELETE", "/v1/secrets/{name}", "delete_secret"),
    "listProjects": Operation("GET", "/v1/projects", "list_projects"),
    "getProject": Operation("GET", "/v1/projects/{name}", "get_project"),
    "setProject": Operation("PUT", "/v1/projects/{name}", "set_project"),
    # nodes
    "listNodes": Operation("GET", "/v1/nodes", "list_nodes"),
    "getNode": Operation("GET", "/v1/nodes/{id}", "get_node"),
    "removeNode": Operation("DELETE", "/v1/nodes/{id}", "remove_node"),
    "cordonNode": Operation("POST", "/v1/nodes/{id}/cordon", "cordon_node"),
    "uncordonNode": Operation("POST", "/v1/nodes/{id}/uncordon", "uncordon_node"),
    "drainNode": Operation("POST", "/v1/nodes/{id}/drain", "drain_node"),
    # lifecycle
    "pauseSandbox": Operation("POST", "/v1/sandboxes/{id}/pause", "pause"),
    "resumeSandbox": Operation("POST", "/v1/sandboxes/{id}/resume", "resume"),
    "suspendSandbox": Operation("POST", "/v1/sandboxes/{id}/suspend", "suspend"),
    "sandboxMetrics": Operation("GET", "/v1/sandboxes/{id}/metrics", "sandbox_metrics"),
    "createSnapshot": Operation("POST", "/v1/sandboxes/{id}/snapshots", "create_snapshot"),
    "listSnapshots": Operation("GET", "/v1/sandboxes/{id}/snapshots", "list_snapshots"),
    "deleteSnapshot": Operation("DELETE", "/v1/sandboxes/{id}/snapshots/{name}", "delete_snapshot"),
    "restoreSandbox": Operation("POST", "/v1/sandboxes/{id}/restore", "restore"),
    "branchSandbox": Operation("POST", "/v1/sandboxes/{id}/branch", "branch"),
    "listSandboxEvents": Operation("GET", "/v1/sandboxes/{id}/events", "events"),
}
