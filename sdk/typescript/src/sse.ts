/** Server-sent events: an incremental parser, and the decoders of the API's
 * two streams (session output, template build logs) that track where to
 * resume. */

export interface RawEvent {
  type: string;
  data: string;
  /** The id this event set itself, undefined if it set none. */
  id?: string;
}

/** text/event-stream parser (HTML spec rules: any line end, comments,
 * multi-line data; an event cut off by the end of the stream is dropped). */
export class SSEParser {
  private buf = "";
  private type = "";
  private data: string[] = [];
  private id: string | undefined;
  private seen = false;
  private started = false;
  private decoder = new TextDecoder();
  retryMs: number | undefined;

  feed(chunk: Uint8Array): RawEvent[] {
    let text = this.decoder.decode(chunk, { stream: true });
    if (!this.started && text) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    this.buf += text;
    const out: RawEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      if (!m) break;
      // A "\r" at the very end may be the first half of "\r\n".
      if (m[0] === "\r" && m.index === this.buf.length - 1) break;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    return out;
  }

  private line(line: string): RawEvent | undefined {
    if (line === "") {
      if (!this.seen) {
        this.id = undefined;
        return undefined;
      }
      const ev: RawEvent = { type: this.type || "message", data: this.data.join("\n"), id: this.id };
      this.type = "";
      this.data = [];
      this.id = undefined;
      this.seen = false;
      return ev;
    }
    if (line.startsWith(":")) return undefined;
    const i = line.indexOf(":");
    const name = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? "" : line.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") {
      this.type = value;
      this.seen = true;
    } else if (name === "data") {
      this.data.push(value);
      this.seen = true;
    } else if (name === "id" && !value.includes("\0")) {
      this.id = value;
    } else if (name === "retry" && /^\d+$/.test(value)) {
      this.retryMs = Number(value);
    }
    return undefined;
  }
}

/** One event of a session's output. `offset` is the output offset after
 * it: attach from it to continue there, from this client or another. */
export interface OutputEvent {
  type: "stdout" | "stderr" | "pty" | "truncated" | "exit" | string;
  data: Uint8Array;
  offset: number;
  exitCode?: number;
  error?: string;
  truncated?: { requested: number; from: number };
}

/** One build log line, or the final done event with the template. */
export interface LogEvent {
  line: string;
  index: number;
  done: boolean;
  template?: Record<string, unknown>;
}

/** Where the next connection of a stream starts. */
export interface Resume {
  query: Record<string, string>;
  headers: Record<string, string>;
}

export interface Decoder<T> {
  exited: boolean;
  decode(raw: RawEvent): T | undefined;
  request(first: boolean): Resume;
}

function b64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const enc = new TextEncoder();

function endOf(raw: RawEvent): number | undefined {
  return raw.id !== undefined && /^\d+$/.test(raw.id) ? Number(raw.id) : undefined;
}

/** Delivers every output byte once, even when a reconnect makes the server
 * resend some. */
export class AttachDecoder implements Decoder<OutputEvent> {
  exited = false;
  constructor(public offset: number) {}

  decode(raw: RawEvent): OutputEvent | undefined {
    const end = endOf(raw);
    if (raw.type === "stdout" || raw.type === "stderr" || raw.type === "pty") {
      const chunk = JSON.parse(raw.data) as { text?: string; base64?: string };
      let data = chunk.base64 ? b64(chunk.base64) : enc.encode(chunk.text ?? "");
      if (end !== undefined) {
        if (end <= this.offset) return undefined; // delivered before a reconnect
        const start = end - data.length;
        if (start < this.offset) data = data.subarray(this.offset - start);
        this.offset = end;
      }
      return { type: raw.type, data, offset: this.offset };
    }
    if (raw.type === "truncated") {
      const t = JSON.parse(raw.data);
      this.offset = Math.max(this.offset, Number(t.from ?? 0), end ?? 0);
      return { type: "truncated", data: new Uint8Array(), offset: this.offset, truncated: t };
    }
    if (raw.type === "exit") {
      const e = JSON.parse(raw.data);
      this.offset = Math.max(this.offset, end ?? 0);
      this.exited = true;
      return { type: "exit", data: new Uint8Array(), offset: this.offset, exitCode: e.exit_code, error: e.error || undefined };
    }
    if (end !== undefined) this.offset = Math.max(this.offset, end);
    return { type: raw.type, data: enc.encode(raw.data), offset: this.offset };
  }

  request(first: boolean): Resume {
    if (first) return { query: this.offset > 0 ? { from: String(this.offset) } : {}, headers: {} };
    return { query: {}, headers: { "Last-Event-ID": String(this.offset) } };
  }
}

export class LogDecoder implements Decoder<LogEvent> {
  exited = false;
  constructor(public nextIndex: number) {}

  decode(raw: RawEvent): LogEvent | undefined {
    if (raw.type === "log") {
      const end = endOf(raw);
      const index = end !== undefined ? end - 1 : this.nextIndex; // ids are index + 1
      if (index < this.nextIndex) return undefined;
      let line: string;
      try {
        line = String(JSON.parse(raw.data));
      } catch {
        line = raw.data;
      }
      this.nextIndex = index + 1;
      return { line, index, done: false };
    }
    if (raw.type === "done") {
      this.exited = true;
      return { line: "", index: this.nextIndex, done: true, template: JSON.parse(raw.data) };
    }
    return undefined;
  }

  request(first: boolean): Resume {
    const query = { from: String(this.nextIndex) };
    return { query, headers: first || this.nextIndex === 0 ? {} : { "Last-Event-ID": String(this.nextIndex) } };
  }
}
