// Streaming resume and error decoding against a fake fetch: a stream cut
// in the middle is reopened with Last-Event-ID at the last offset
// delivered, and what the server resends is not delivered twice.
import assert from "node:assert/strict";
import { test } from "node:test";
import { APIError, Client, NotFoundError, SSEParser, StreamError } from "../dist/index.js";

const enc = new TextEncoder();
const chunk = (kind, text, end) => `event: ${kind}\nid: ${end}\ndata: ${JSON.stringify({ text })}\n\n`;

// A body that sends parts, then fails like a dropped connection (or ends).
function body(parts, fail) {
  return new ReadableStream({
    async pull(ctl) {
      if (parts.length) return ctl.enqueue(enc.encode(parts.shift()));
      if (fail) ctl.error(new TypeError("terminated: other side closed"));
      else ctl.close();
    },
  });
}
const sse = (parts, fail = false) => new Response(body([...parts], fail), { headers: { "Content-Type": "text/event-stream" } });

function fake(responses) {
  const seen = [];
  const fetch = async (url, init) => {
    const u = new URL(url);
    seen.push({ path: u.pathname, from: u.searchParams.get("from"), lastEventId: init.headers["Last-Event-ID"] ?? null });
    return responses[seen.length - 1]();
  };
  return { seen, client: new Client({ baseUrl: "http://space.test", apiKey: "k", fetch, sleep: async () => {} }) };
}

test("attach resumes from the last offset without duplicates", async () => {
  const { seen, client } = fake([
    () => sse([chunk("stdout", "hello ", 6), "event: stdout\nid: 1"], true),
    () => sse([": keepalive\n\n", chunk("stdout", "lo world", 11)]), // overlap, then an early end
    () => sse(['event: exit\r\nid: 11\r\ndata: {"exit_code": 3}\r\n\r\n']),
  ]);
  const events = [];
  for await (const ev of client.attach("sb1", "s1")) events.push(ev);
  const out = Buffer.concat(events.filter((e) => e.type === "stdout").map((e) => e.data)).toString();
  assert.equal(out, "hello world");
  assert.deepEqual(events.at(-1), { type: "exit", data: new Uint8Array(), offset: 11, exitCode: 3, error: undefined });
  assert.deepEqual(seen.map((s) => [s.from, s.lastEventId]), [[null, null], [null, "6"], [null, "11"]]);
  assert.equal(seen[0].path, "/v1/sandboxes/sb1/sessions/s1/attach");
});

test("attach from an offset starts with ?from=", async () => {
  const { seen, client } = fake([() => sse(['event: exit\nid: 40\ndata: {"exit_code":0}\n\n'])]);
  const types = [];
  for await (const ev of client.attach("a", "b", { offset: 40 })) types.push(ev.type);
  assert.deepEqual(types, ["exit"]);
  assert.deepEqual([seen[0].from, seen[0].lastEventId], ["40", null]);
});

test("reconnecting gives up after a bounded number of failures", async () => {
  const { client } = fake(Array.from({ length: 20 }, () => () => sse(["retry: 1\n\n"], true)));
  await assert.rejects(async () => { for await (const _ of client.attach("a", "b")) { /* nothing */ } }, StreamError);
});

test("errors carry the API's code and message", async () => {
  const client = new Client({
    baseUrl: "http://space.test",
    fetch: async (url) => url.endsWith("/gone")
      ? new Response(JSON.stringify({ code: 404, message: "sandbox gone not found" }), { status: 404 })
      : new Response("<html>bad gateway</html>", { status: 502 }),
  });
  await assert.rejects(client.getSandbox("gone"), (e) => e instanceof NotFoundError && e.code === 404 && e.message === "sandbox gone not found");
  await assert.rejects(client.getSandbox("x"), (e) => e instanceof APIError && e.code === 502 && /bad gateway/.test(e.message));
  const attach = client.attach("a", "gone");
  await assert.rejects(attach.next(), APIError);
});

test("path parameters are escaped and empty ones refused", async () => {
  const urls = [];
  const client = new Client({ baseUrl: "http://space.test/", fetch: async (url) => { urls.push(url); return new Response("{}"); } });
  await client.getSandbox("../keys");
  assert.deepEqual(urls, ["http://space.test/v1/sandboxes/..%2Fkeys"]);
  await assert.rejects(client.getSandbox(""), TypeError);
});

test("the SSE parser follows the spec's line rules", () => {
  const p = new SSEParser();
  assert.deepEqual(p.feed(enc.encode("\ufeff: c\ndata: a\ndata: b\r")), []);
  assert.deepEqual(p.feed(enc.encode("\n\nevent: x\ndata:y\n\n")).map((e) => [e.type, e.data]), [["message", "a\nb"], ["x", "y"]]);
});

test("request shapes: body, query and method as the spec says", async () => {
  const sent = [];
  const client = new Client({
    baseUrl: "http://space.test",
    fetch: async (url, init) => {
      const u = new URL(url);
      sent.push({ method: init.method, path: u.pathname, query: Object.fromEntries(u.searchParams), body: init.body });
      return new Response(JSON.stringify({ id: "sb1", name: "t" }), { status: 202 });
    },
  });
  await client.createSandbox("minimal", { env: { A: "1" }, volume_mounts: [{ volume: "v", path: "/mnt" }], network: { deny: ["x.test"] }, auto_resume: false });
  await client.createTemplate("from: minimal\n", "mine");
  await client.listSandboxes({ state: "running", metadata: { b: "2", a: "1" } });
  await client.writeStdin("sb1", "s1", "hi", { close: true });
  await client.suspend("sb1", { keep_memory: false });
  assert.deepEqual([sent[0].method, sent[0].path], ["POST", "/v1/sandboxes"]);
  assert.deepEqual(JSON.parse(sent[0].body), { template: "minimal", env: { A: "1" }, volume_mounts: [{ volume: "v", path: "/mnt" }], network: { deny: ["x.test"] }, auto_resume: false });
  assert.deepEqual(JSON.parse(sent[1].body), { name: "mine", recipe: "from: minimal\n" });
  assert.deepEqual(sent[2].query, { state: "running", "metadata.a": "1", "metadata.b": "2" });
  assert.deepEqual([sent[3].path, sent[3].query, sent[3].body], ["/v1/sandboxes/sb1/sessions/s1/stdin", { close: "true" }, "hi"]);
  assert.deepEqual(JSON.parse(sent[4].body), { keep_memory: false });
});
