/** The API's objects: the JSON the server sends, unchanged (snake_case, as
 * in docs/openapi.yaml). A newer server may add fields. */

export interface NetworkPolicy {
  mode?: "none" | "";
  allow_internet?: boolean;
  allow?: string[];
  deny?: string[];
  allow_public_traffic?: boolean;
  mask_request_host?: string;
  bandwidth_mbit?: number;
  max_connections?: number;
}

export interface VolumeMount {
  volume: string;
  path: string;
  read_only?: boolean;
}

export interface CreateSandboxOptions {
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  vcpus?: number;
  memory_mb?: number;
  disk_mb?: number;
  timeout_s?: number;
  on_timeout?: string;
  auto_resume?: boolean;
  idle_suspend_s?: number;
  keep_memory?: boolean;
  snapshot_interval_s?: number;
  snapshot_retention_s?: number;
  snapshot?: string;
  network?: NetworkPolicy | "none";
  credentials?: Record<string, unknown>[];
  volume_mounts?: VolumeMount[];
  /** Wait until the sandbox runs before returning. */
  wait?: boolean;
}

export interface Sandbox {
  id: string;
  template: string;
  state: string;
  vcpus?: number;
  memory_mb?: number;
  disk_mb?: number;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  network?: NetworkPolicy;
  volume_mounts?: VolumeMount[];
  access_token?: string;
  created_at?: string;
  expires_at?: string;
  branch_of?: string;
  node?: string;
  error?: string;
  [field: string]: unknown;
}

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  timeout_s?: number;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exit_code: number;
  output_truncated?: boolean;
}

export interface SessionOptions extends Omit<ExecOptions, "timeout_s"> {
  tty?: boolean;
  stdin?: boolean;
  cols?: number;
  rows?: number;
  tag?: string;
}

export interface Session {
  id: string;
  pid: number;
  cmd: string[];
  tag?: string;
  tty: boolean;
  state: string;
  exit_code?: number;
  error?: string;
  started_at: string;
  ended_at?: string;
  [field: string]: unknown;
}

export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | string;
  size: number;
  mode: number;
  owner?: string;
  group?: string;
  modified_at: string;
  symlink_target?: string;
}

export interface FileList {
  entries: FileEntry[];
  next_cursor?: string;
}

export interface ListDirOptions {
  depth?: number;
  limit?: number;
  cursor?: string;
  snapshot?: string;
}

export type Template = { name: string; state?: string; logs?: string[]; [field: string]: unknown };
export type Volume = { id: string; name: string; project: string; size_mb?: number; [field: string]: unknown };
export type Snapshot = { id: string; name: string; sandbox_id?: string; [field: string]: unknown };
export type SandboxEvent = { time: string; type: string; from?: string; to?: string; message?: string };
export type MetricsList = { metrics: Record<string, unknown>[] };
export type APIKey = { id: string; name: string; prefix: string; admin: boolean; project: string; key?: string; created_at?: string };
export type Secret = { name: string; project: string; created_at?: string; updated_at?: string };
export type Project = { name: string; [field: string]: unknown };
export type QuotaSettings = {
  max_sandboxes?: number;
  max_memory_mb?: number;
  max_snapshots?: number;
  creates_per_second?: number;
  max_volume_mb?: number;
};
export type Node = { id: string; state: string; [field: string]: unknown };
