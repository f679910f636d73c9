/**
 * The mapping table: every operation of docs/openapi.yaml, by operationId,
 * with its method, path template and the Client method that calls it.
 * test/spec.test.mjs fails when the spec has an operation (method + path)
 * missing here, or when a method named here is missing from Client.
 */
export interface Operation {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  sdkMethod: string;
}

export const OPERATIONS = {
  health: { method: "GET", path: "/healthz", sdkMethod: "health" },
  metrics: { method: "GET", path: "/metrics", sdkMethod: "serverMetrics" },
  createSandbox: { method: "POST", path: "/v1/sandboxes", sdkMethod: "createSandbox" },
  listSandboxes: { method: "GET", path: "/v1/sandboxes", sdkMethod: "listSandboxes" },
  getSandbox: { method: "GET", path: "/v1/sandboxes/{id}", sdkMethod: "getSandbox" },
  deleteSandbox: { method: "DELETE", path: "/v1/sandboxes/{id}", sdkMethod: "deleteSandbox" },
  waitSandbox: { method: "GET", path: "/v1/sandboxes/{id}/wait", sdkMethod: "waitSandbox" },
  setSandboxTimeout: { method: "POST", path: "/v1/sandboxes/{id}/timeout", sdkMethod: "setTimeout" },
  setSandboxNetwork: { method: "PUT", path: "/v1/sandboxes/{id}/network", sdkMethod: "setNetwork" },
  exec: { method: "POST", path: "/v1/sandboxes/{id}/exec", sdkMethod: "exec" },
  createSession: { method: "POST", path: "/v1/sandboxes/{id}/sessions", sdkMethod: "createSession" },
  listSessions: { method: "GET", path: "/v1/sandboxes/{id}/sessions", sdkMethod: "listSessions" },
  getSession: { method: "GET", path: "/v1/sandboxes/{id}/sessions/{sid}", sdkMethod: "getSession" },
  attachSession: { method: "GET", path: "/v1/sandboxes/{id}/sessions/{sid}/attach", sdkMethod: "attach" },
  writeSessionStdin: { method: "POST", path: "/v1/sandboxes/{id}/sessions/{sid}/stdin", sdkMethod: "writeStdin" },
  signalSession: { method: "POST", path: "/v1/sandboxes/{id}/sessions/{sid}/signal", sdkMethod: "signal" },
  resizeSession: { method: "POST", path: "/v1/sandboxes/{id}/sessions/{sid}/resize", sdkMethod: "resize" },
  readFile: { method: "GET", path: "/v1/sandboxes/{id}/files", sdkMethod: "readFile" },
  writeFile: { method: "PUT", path: "/v1/sandboxes/{id}/files", sdkMethod: "writeFile" },
  removeFile: { method: "DELETE", path: "/v1/sandboxes/{id}/files", sdkMethod: "removeFile" },
  makeDirectory: { method: "POST", path: "/v1/sandboxes/{id}/files/mkdir", sdkMethod: "mkdir" },
  moveFile: { method: "POST", path: "/v1/sandboxes/{id}/files/move", sdkMethod: "move" },
  createTemplate: { method: "POST", path: "/v1/templates", sdkMethod: "createTemplate" },
  listTemplates: { method: "GET", path: "/v1/templates", sdkMethod: "listTemplates" },
  getTemplate: { method: "GET", path: "/v1/templates/{name}", sdkMethod: "getTemplate" },
  deleteTemplate: { method: "DELETE", path: "/v1/templates/{name}", sdkMethod: "deleteTemplate" },
  setTemplatePool: { method: "PUT", path: "/v1/templates/{name}/pool", sdkMethod: "setPool" },
  streamTemplateLogs: { method: "GET", path: "/v1/templates/{name}/logs", sdkMethod: "templateLogs" },
  createVolume: { method: "POST", path: "/v1/volumes", sdkMethod: "createVolume" },
  listVolumes: { method: "GET", path: "/v1/volumes", sdkMethod: "listVolumes" },
  getVolume: { method: "GET", path: "/v1/volumes/{id}", sdkMethod: "getVolume" },
  deleteVolume: { method: "DELETE", path: "/v1/volumes/{id}", sdkMethod: "deleteVolume" },
  readVolumeFile: { method: "GET", path: "/v1/volumes/{id}/files", sdkMethod: "readVolumeFile" },
  writeVolumeFile: { method: "PUT", path: "/v1/volumes/{id}/files", sdkMethod: "writeVolumeFile" },
  removeVolumeFile: { method: "DELETE", path: "/v1/volumes/{id}/files", sdkMethod: "removeVolumeFile" },
  mkdirVolume: { method: "POST", path: "/v1/volumes/{id}/files/mkdir", sdkMethod: "mkdirVolume" },
  createKey: { method: "POST", path: "/v1/keys", sdkMethod: "createKey" },
  listKeys: { method: "GET", path: "/v1/keys", sdkMethod: "listKeys" },
  revokeKey: { method: "DELETE", path: "/v1/keys/{id}", sdkMethod: "revokeKey" },
  setSecret: { method: "POST", path: "/v1/secrets", sdkMethod: "setSecret" },
  listSecrets: { method: "GET", path: "/v1/secrets", sdkMethod: "listSecrets" },
  deleteSecret: { method: "DELETE", path: "/v1/secrets/{name}", sdkMethod: "deleteSecret" },
  listProjects: { method: "GET", path: "/v1/projects", sdkMethod: "listProjects" },
  getProject: { method: "GET", path: "/v1/projects/{name}", sdkMethod: "getProject" },
  setProject: { method: "PUT", path: "/v1/projects/{name}", sdkMethod: "setProject" },
  listNodes: { method: "GET", path: "/v1/nodes", sdkMethod: "listNodes" },
  getNode: { method: "GET", path: "/v1/nodes/{id}", sdkMethod: "getNode" },
  removeNode: { method: "DELETE", path: "/v1/nodes/{id}", sdkMethod: "removeNode" },
  cordonNode: { method: "POST", path: "/v1/nodes/{id}/cordon", sdkMethod: "cordonNode" },
  uncordonNode: { method: "POST", path: "/v1/nodes/{id}/uncordon", sdkMethod: "uncordonNode" },
  drainNode: { method: "POST", path: "/v1/nodes/{id}/drain", sdkMethod: "drainNode" },
  pauseSandbox: { method: "POST", path: "/v1/sandboxes/{id}/pause", sdkMethod: "pause" },
  resumeSandbox: { method: "POST", path: "/v1/sandboxes/{id}/resume", sdkMethod: "resume" },
  suspendSandbox: { method: "POST", path: "/v1/sandboxes/{id}/suspend", sdkMethod: "suspend" },
  sandboxMetrics: { method: "GET", path: "/v1/sandboxes/{id}/metrics", sdkMethod: "sandboxMetrics" },
  createSnapshot: { method: "POST", path: "/v1/sandboxes/{id}/snapshots", sdkMethod: "createSnapshot" },
  listSnapshots: { method: "GET", path: "/v1/sandboxes/{id}/snapshots", sdkMethod: "listSnapshots" },
  deleteSnapshot: { method: "DELETE", path: "/v1/sandboxes/{id}/snapshots/{name}", sdkMethod: "deleteSnapshot" },
  restoreSandbox: { method: "POST", path: "/v1/sandboxes/{id}/restore", sdkMethod: "restore" },
  branchSandbox: { method: "POST", path: "/v1/sandboxes/{id}/branch", sdkMethod: "branch" },
  listSandboxEvents: { method: "GET", path: "/v1/sandboxes/{id}/events", sdkMethod: "events" },
} as const satisfies Record<string, Operation>;

export type OperationId = keyof typeof OPERATIONS;
