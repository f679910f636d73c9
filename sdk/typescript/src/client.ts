import { APIError, errorFromResponse, StreamError } from "./errors.js";
import { OPERATIONS, type OperationId } from "./ops.js";
import { AttachDecoder, type Decoder, LogDecoder, type LogEvent, type OutputEvent, SSEParser } from "./sse.js";
import type * as T from "./types.js";
import { VERSION } from "./version.js";

type Query = Record<string, string | number | boolean | undefined | null>;

interface Call {
  params?: Record<string, string>;
  query?: Query;
  json?: unknown;
  body?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** The server, e.g. http://127.0.0.1:7070 (default: $SPACE_URL in Node). */
  baseUrl?: string;
  /** An API key (default: $SPACE_API_KEY in Node). */
  apiKey?: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
  /** Reconnects of an event stream that deliver nothing before it fails. */
  maxStreamFailures?: number;
  /** Waits between reconnects (ms, doubling from 250 up to 5000). */
  sleep?: (ms: number) => Promise<void>;
}

const env = (name: string): string | undefined =>
  (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];

type Data = Uint8Array | string;
const bytes = (d: Data): BodyInit => (typeof d === "string" ? d : (d as Uint8Array<ArrayBuffer>));

/**
 * A client of one space server's native API. Every method maps to one
 * operation of docs/openapi.yaml (see OPERATIONS); failures throw APIError
 * with the API's `code` and `message`.
 */
export class Client {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly maxStreamFailures: number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? env("SPACE_URL") ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
    const key = opts.apiKey ?? env("SPACE_API_KEY");
    this.headers = key ? { Authorization: `Bearer ${key}` } : {};
    // Browsers refuse to set User-Agent; Node sends it.
    if (typeof window === "undefined") this.headers["User-Agent"] = `space-sandbox-js/${VERSION}`;
    this.fetchImpl = opts.fetch ?? ((...a) => fetch(...a));
    this.maxStreamFailures = opts.maxStreamFailures ?? 8;
    this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  }

  private url(op: OperationId, params: Record<string, string> = {}, query: Query = {}): string {
    let path: string = OPERATIONS[op].path;
    for (const [name, value] of Object.entries(params)) {
      if (!value) throw new TypeError(`${op}: ${name} must not be empty`);
      path = path.replace(`{${name}}`, encodeURIComponent(value));
    }
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v === undefined || v === null || v === "") continue;
      q.set(k, String(v));
    }
    const s = q.toString();
    return this.baseUrl + path + (s ? `?${s}` : "");
  }

  private async send(op: OperationId, c: Call = {}): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers, ...c.headers };
    let body = c.body;
    if (c.json !== undefined) {
      body = JSON.stringify(c.json);
      headers["Content-Type"] = "application/json";
    } else if (body !== undefined) {
      headers["Content-Type"] ??= "application/octet-stream";
    }
    const resp = await this.fetchImpl(this.url(op, c.params, c.query), {
      method: OPERATIONS[op].method,
      headers,
      body,
      signal: c.signal,
    });
    if (resp.status >= 400) throw await errorFromResponse(resp);
    return resp;
  }

  private async json<R>(op: OperationId, c: Call = {}, key?: string): Promise<R> {
    const resp = await this.send(op, c);
    const text = await resp.text();
    if (resp.status === 204 || !text) return undefined as R;
    const data = JSON.parse(text);
    return (key ? (data[key] ?? []) : data) as R;
  }

  private async raw(op: OperationId, c: Call, path: string): Promise<Uint8Array> {
    const resp = await this.send(op, c);
    if ((resp.headers.get("Content-Type") ?? "").startsWith("application/json")) {
      throw new TypeError(`${path} is a directory`);
    }
    return new Uint8Array(await resp.arrayBuffer());
  }

  // -- health ---------------------------------------------------------
  health(): Promise<Record<string, unknown>> {
    return this.json("health");
  }

  async serverMetrics(): Promise<string> {
    return (await this.send("metrics")).text();
  }

  // -- sandboxes ------------------------------------------------------
  /** Create a sandbox (state `starting`; `wait: true` waits until it runs). */
  async createSandbox(template = "base", opts: T.CreateSandboxOptions = {}): Promise<T.Sandbox> {
    const { wait, ...fields } = opts;
    const sb = await this.json<T.Sandbox>("createSandbox", { json: { template, ...fields } });
    return wait ? this.waitSandbox(sb.id, "running") : sb;
  }

  listSandboxes(opts: { state?: string; metadata?: Record<string, string>; project?: string } = {}): Promise<T.Sandbox[]> {
    const query: Query = { state: opts.state, project: opts.project };
    for (const k of Object.keys(opts.metadata ?? {}).sort()) query[`metadata.${k}`] = opts.metadata![k];
    return this.json("listSandboxes", { query }, "sandboxes");
  }

  getSandbox(id: string): Promise<T.Sandbox> {
    return this.json("getSandbox", { params: { id } });
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.json("deleteSandbox", { params: { id } });
  }

  waitSandbox(id: string, state = "running", timeoutS?: number): Promise<T.Sandbox> {
    return this.json("waitSandbox", { params: { id }, query: { state, timeout_s: timeoutS } });
  }

  setTimeout(id: string, timeoutS: number): Promise<T.Sandbox> {
    return this.json("setSandboxTimeout", { params: { id }, json: { timeout_s: timeoutS } });
  }

  /** Replace the sandbox's egress policy (refusals become `network.denied` events). */
  setNetwork(id: string, policy: T.NetworkPolicy): Promise<T.Sandbox> {
    return this.json("setSandboxNetwork", { params: { id }, json: policy });
  }

  pause(id: string): Promise<T.Sandbox> {
    return this.json("pauseSandbox", { params: { id } });
  }

  resume(id: string): Promise<T.Sandbox> {
    return this.json("resumeSandbox", { params: { id } });
  }

  suspend(id: string, opts: { keep_memory?: boolean } = {}): Promise<T.Sandbox> {
    return this.json("suspendSandbox", { params: { id }, json: opts.keep_memory === undefined ? undefined : opts });
  }

  branch(id: string, count = 1): Promise<T.Sandbox[]> {
    return this.json("branchSandbox", { params: { id }, json: { count } }, "sandboxes");
  }

  createSnapshot(id: string, name?: string): Promise<T.Snapshot> {
    return this.json("createSnapshot", { params: { id }, json: name ? { name } : {} });
  }

  listSnapshots(id: string): Promise<T.Snapshot[]> {
    return this.json("listSnapshots", { params: { id } }, "snapshots");
  }

  async deleteSnapshot(id: string, name: string): Promise<void> {
    await this.json("deleteSnapshot", { params: { id, name } });
  }

  restore(id: string, snapshot: string): Promise<T.Sandbox> {
    return this.json("restoreSandbox", { params: { id }, json: { snapshot } });
  }

  sandboxMetrics(id: string, range: { start?: string; end?: string } = {}): Promise<T.MetricsList> {
    return this.json("sandboxMetrics", { params: { id }, query: range });
  }

  events(id: string): Promise<T.SandboxEvent[]> {
    return this.json("listSandboxEvents", { params: { id } }, "events");
  }

  /** What the sandbox's egress policy refused (its `network.denied` events,
   * oldest first; the node rate-limits them per sandbox). */
  async networkDenials(id: string): Promise<T.SandboxEvent[]> {
    return (await this.events(id)).filter((e) => e.type === "network.denied");
  }

  // -- exec and sessions ---------------------------------------------
  exec(id: string, cmd: string[], opts: T.ExecOptions = {}): Promise<T.ExecResult> {
    return this.json("exec", { params: { id }, json: { cmd, ...opts } });
  }

  /** Start a session: it runs on when this client goes away; attach again
   * from any client with its id and an offset. */
  createSession(id: string, cmd: string[], opts: T.SessionOptions = {}): Promise<T.Session> {
    return this.json("createSession", { params: { id }, json: { cmd, ...opts } });
  }

  listSessions(id: string): Promise<T.Session[]> {
    return this.json("listSessions", { params: { id } }, "sessions");
  }

  getSession(id: string, sid: string): Promise<T.Session> {
    return this.json("getSession", { params: { id, sid } });
  }

  async writeStdin(id: string, sid: string, data: Data, opts: { close?: boolean } = {}): Promise<void> {
    await this.json("writeSessionStdin", { params: { id, sid }, query: { close: opts.close || undefined }, body: bytes(data) });
  }

  async signal(id: string, sid: string, signal: string): Promise<void> {
    await this.json("signalSession", { params: { id, sid }, json: { signal } });
  }

  async resize(id: string, sid: string, cols: number, rows: number): Promise<void> {
    await this.json("resizeSession", { params: { id, sid }, json: { cols, rows } });
  }

  /** Stream a session's output from `offset` up to its exit event. A dropped
   * connection is reopened from the offset of the last byte delivered, so
   * every byte arrives once; each event's `offset` is where another attach
   * would continue. Breaking out of the loop (or `signal`) closes it. */
  attach(id: string, sid: string, opts: { offset?: number; signal?: AbortSignal } = {}): AsyncIterableIterator<OutputEvent> {
    return this.events_("attachSession", { id, sid }, new AttachDecoder(opts.offset ?? 0), opts.signal);
  }

  /** Stream a template's build log from line `start`, ending with the done
   * event (resumed like attach). */
  templateLogs(name: string, opts: { start?: number; signal?: AbortSignal } = {}): AsyncIterableIterator<LogEvent> {
    return this.events_("streamTemplateLogs", { name }, new LogDecoder(opts.start ?? 0), opts.signal);
  }

  private async *events_<E>(op: OperationId, params: Record<string, string>, dec: Decoder<E>, outer?: AbortSignal): AsyncIterableIterator<E> {
    let first = true;
    let failures = 0;
    let retryMs: number | undefined;
    while (!dec.exited) {
      const ctl = new AbortController();
      const onAbort = () => ctl.abort(outer?.reason);
      outer?.addEventListener("abort", onAbort, { once: true });
      let last: unknown;
      try {
        const { query, headers } = dec.request(first);
        const resp = await this.send(op, { params, query, headers: { ...headers, Accept: "text/event-stream" }, signal: ctl.signal });
        first = false;
        const parser = new SSEParser();
        const reader = resp.body!.getReader();
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            for (const raw of parser.feed(value)) {
              const ev = dec.decode(raw);
              failures = 0;
              if (ev !== undefined) yield ev;
              if (dec.exited) return;
            }
          }
        } finally {
          retryMs = parser.retryMs ?? retryMs;
          ctl.abort();
        }
        last = new StreamError("event stream ended before its last event");
      } catch (err) {
        // The first connection's errors (404, refused) are the caller's;
        // so are API errors and the caller's own abort.
        if (first || outer?.aborted || err instanceof APIError) throw err;
        last = err;
      } finally {
        outer?.removeEventListener("abort", onAbort);
      }
      failures++;
      if (failures > this.maxStreamFailures) {
        throw new StreamError(`${op}: reconnecting failed ${failures - 1} times: ${String(last)}`);
      }
      await this.sleep(retryMs ?? Math.min(5000, 250 * 2 ** (failures - 1)));
    }
  }

  // -- files ------------------------------------------------------------
  readFile(id: string, path: string, opts: { snapshot?: string } = {}): Promise<Uint8Array> {
    return this.raw("readFile", { params: { id }, query: { path, snapshot: opts.snapshot } }, path);
  }

  listDir(id: string, path: string, opts: T.ListDirOptions = {}): Promise<T.FileList> {
    return this.json("readFile", { params: { id }, query: { path, depth: opts.depth ?? 1, ...opts }, headers: { Accept: "application/json" } });
  }

  writeFile(id: string, path: string, data: Data): Promise<T.FileEntry> {
    return this.json("writeFile", { params: { id }, query: { path }, body: bytes(data) });
  }

  async removeFile(id: string, path: string): Promise<void> {
    await this.json("removeFile", { params: { id }, query: { path } });
  }

  mkdir(id: string, path: string): Promise<T.FileEntry> {
    return this.json("makeDirectory", { params: { id }, json: { path } });
  }

  move(id: string, from: string, to: string): Promise<T.FileEntry> {
    return this.json("moveFile", { params: { id }, json: { from, to } });
  }

  // -- templates and pools ---------------------------------------------
  /** Build a template from a recipe (YAML text); follow it with templateLogs. */
  createTemplate(recipe: string, name?: string): Promise<T.Template> {
    return this.json("createTemplate", { json: name ? { name, recipe } : { recipe } });
  }

  listTemplates(opts: { project?: string } = {}): Promise<T.Template[]> {
    return this.json("listTemplates", { query: opts }, "templates");
  }

  getTemplate(name: string, opts: { logs_from?: number } = {}): Promise<T.Template> {
    return this.json("getTemplate", { params: { name }, query: opts });
  }

  async deleteTemplate(name: string): Promise<void> {
    await this.json("deleteTemplate", { params: { name } });
  }

  setPool(name: string, size: number): Promise<T.Template> {
    return this.json("setTemplatePool", { params: { name }, json: { size } });
  }

  // -- volumes ------------------------------------------------------------
  createVolume(name: string, opts: { size_mb?: number } = {}): Promise<T.Volume> {
    return this.json("createVolume", { json: { name, ...opts } });
  }

  listVolumes(opts: { project?: string } = {}): Promise<T.Volume[]> {
    return this.json("listVolumes", { query: opts }, "volumes");
  }

  getVolume(id: string): Promise<T.Volume> {
    return this.json("getVolume", { params: { id } });
  }

  async deleteVolume(id: string): Promise<void> {
    await this.json("deleteVolume", { params: { id } });
  }

  readVolumeFile(id: string, path: string): Promise<Uint8Array> {
    return this.raw("readVolumeFile", { params: { id }, query: { path } }, path);
  }

  listVolumeDir(id: string, path = "/", opts: Omit<T.ListDirOptions, "snapshot"> = {}): Promise<T.FileList> {
    return this.json("readVolumeFile", { params: { id }, query: { path, depth: opts.depth ?? 1, ...opts }, headers: { Accept: "application/json" } });
  }

  writeVolumeFile(id: string, path: string, data: Data): Promise<T.FileEntry> {
    return this.json("writeVolumeFile", { params: { id }, query: { path }, body: bytes(data) });
  }

  async removeVolumeFile(id: string, path: string): Promise<void> {
    await this.json("removeVolumeFile", { params: { id }, query: { path } });
  }

  mkdirVolume(id: string, path: string): Promise<T.FileEntry> {
    return this.json("mkdirVolume", { params: { id }, json: { path } });
  }

  // -- keys, secrets, projects -----------------------------------------
  createKey(name: string, opts: { project?: string; admin?: boolean } = {}): Promise<T.APIKey> {
    return this.json("createKey", { json: { name, ...opts } });
  }

  listKeys(opts: { project?: string } = {}): Promise<T.APIKey[]> {
    return this.json("listKeys", { query: opts }, "keys");
  }

  async revokeKey(id: string): Promise<void> {
    await this.json("revokeKey", { params: { id } });
  }

  setSecret(name: string, value: string, opts: { project?: string } = {}): Promise<T.Secret> {
    return this.json("setSecret", { json: { name, value, ...opts } });
  }

  listSecrets(opts: { project?: string } = {}): Promise<T.Secret[]> {
    return this.json("listSecrets", { query: opts }, "secrets");
  }

  async deleteSecret(name: string, opts: { project?: string } = {}): Promise<void> {
    await this.json("deleteSecret", { params: { name }, query: opts });
  }

  listProjects(): Promise<T.Project[]> {
    return this.json("listProjects", {}, "projects");
  }

  getProject(name: string): Promise<T.Project> {
    return this.json("getProject", { params: { name } });
  }

  setProject(name: string, quota: T.QuotaSettings): Promise<T.Project> {
    return this.json("setProject", { params: { name }, json: quota });
  }

  // -- nodes --------------------------------------------------------------
  listNodes(): Promise<T.Node[]> {
    return this.json("listNodes", {}, "nodes");
  }

  getNode(id: string): Promise<T.Node> {
    return this.json("getNode", { params: { id } });
  }

  /** Remove a node; with `force` a node with sandboxes is marked lost (and returned). */
  removeNode(id: string, opts: { force?: boolean } = {}): Promise<T.Node | undefined> {
    return this.json("removeNode", { params: { id }, query: { force: opts.force || undefined } });
  }

  cordonNode(id: string): Promise<T.Node> {
    return this.json("cordonNode", { params: { id } });
  }

  uncordonNode(id: string): Promise<T.Node> {
    return this.json("uncordonNode", { params: { id } });
  }

  drainNode(id: string): Promise<T.Node> {
    return this.json("drainNode", { params: { id } });
  }
}
