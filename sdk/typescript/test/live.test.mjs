// @space-sandbox/sdk against a live server: SPACE_URL, SPACE_API_KEY (an
// admin key), SPACE_TEMPLATE (default minimal). Without SPACE_URL these
// tests skip, unless SPACE_SDK_LIVE=1 (test/e2e sets it), which fails.
// test/e2e/sdk_native_test.go runs them against the in-process server.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { createConnection, createServer } from "node:net";
import { after, describe, test } from "node:test";
import { APIError, Client, ConflictError, NotFoundError, VERSION } from "../dist/index.js";

const URL_ = process.env.SPACE_URL;
const KEY = process.env.SPACE_API_KEY;
const TEMPLATE = process.env.SPACE_TEMPLATE ?? "minimal";
if (!URL_ && process.env.SPACE_SDK_LIVE === "1") throw new Error("SPACE_SDK_LIVE=1 but SPACE_URL is not set");

const uniq = (p) => `${p}-${randomBytes(4).toString("hex")}`;
const text = (events, type = "stdout") => Buffer.concat(events.filter((e) => e.type === type).map((e) => e.data)).toString();
const dec = (b) => Buffer.from(b).toString();

describe("live server", { skip: URL_ ? false : "no SPACE_URL: live tests need a server" }, () => {
  const client = new Client({ baseUrl: URL_, apiKey: KEY });
  const made = [];
  const sandbox = async (opts = {}) => {
    const sb = await client.createSandbox(TEMPLATE, { wait: true, ...opts });
    made.push(sb.id);
    return sb;
  };
  after(async () => {
    for (const id of made) await client.deleteSandbox(id).catch((e) => { if (!(e instanceof NotFoundError)) throw e; });
  });

  test("sandboxes: create with env, metadata, limits and network; exec; files; lifecycle", async () => {
    const tag = uniq("ts");
    const sb = await sandbox({ env: { SDK_GREETING: "hi from env" }, metadata: { sdk: tag }, vcpus: 1, memory_mb: 256, timeout_s: 600, network: { allow_internet: false, deny: ["203.0.113.9"] } });
    assert.equal(sb.state, "running");
    assert.deepEqual((await client.listSandboxes({ metadata: { sdk: tag } })).map((s) => s.id), [sb.id]);
    assert.ok((await client.setTimeout(sb.id, 900)).expires_at);
    const res = await client.exec(sb.id, ["sh", "-c", 'echo "$SDK_GREETING"; echo oops >&2; exit 4']);
    assert.deepEqual([res.stdout, res.stderr, res.exit_code], ["hi from env\n", "oops\n", 4]);

    const bin = new Uint8Array([0, 1, 2, 255]);
    assert.equal((await client.writeFile(sb.id, "/tmp/sdk/a.bin", bin)).size, 4);
    assert.deepEqual(await client.readFile(sb.id, "/tmp/sdk/a.bin"), bin);
    await client.mkdir(sb.id, "/tmp/sdk/sub");
    await client.move(sb.id, "/tmp/sdk/a.bin", "/tmp/sdk/sub/b.bin");
    assert.deepEqual((await client.listDir(sb.id, "/tmp/sdk", { depth: 2 })).entries.map((e) => e.path), ["/tmp/sdk/sub", "/tmp/sdk/sub/b.bin"]);
    await client.removeFile(sb.id, "/tmp/sdk/sub/b.bin");
    await assert.rejects(client.readFile(sb.id, "/tmp/sdk/sub/b.bin"), (e) => e instanceof NotFoundError && e.code === 404 && e.message.length > 0);

    assert.equal((await client.pause(sb.id)).state, "paused");
    assert.equal((await client.resume(sb.id)).state, "running");
    assert.equal((await client.suspend(sb.id)).state, "suspended");
    assert.equal((await client.resume(sb.id)).state, "running");
    assert.ok((await client.events(sb.id)).length > 0);
    assert.ok(Array.isArray((await client.sandboxMetrics(sb.id)).metrics));
    await client.deleteSandbox(sb.id);
    await assert.rejects(client.getSandbox(sb.id), NotFoundError);
  });

  test("a session outlives its client and is re-attached by offset", async () => {
    const sb = await sandbox();
    const first = new Client({ baseUrl: URL_, apiKey: KEY });
    const s = await first.createSession(sb.id, ["cat"], { stdin: true, tag: "sdk-cat" });
    await first.writeStdin(sb.id, s.id, "one\n");
    let seen = "", offset = 0;
    for await (const ev of first.attach(sb.id, s.id)) {
      seen += dec(ev.data);
      offset = ev.offset;
      if (seen === "one\n") break; // leaving the loop closes the stream
    }
    assert.deepEqual([seen, offset], ["one\n", 4]);
    // Another client (another process, in real life) continues there.
    const second = new Client({ baseUrl: URL_, apiKey: KEY });
    assert.ok((await second.listSessions(sb.id)).some((x) => x.id === s.id));
    await second.writeStdin(sb.id, s.id, "two\n", { close: true });
    const events = [];
    for await (const ev of second.attach(sb.id, s.id, { offset })) events.push(ev);
    assert.equal(text(events), "two\n");
    assert.equal(events.at(-1).type, "exit");
    assert.equal(events.at(-1).exitCode, 0);
    const all = [];
    for await (const ev of second.attach(sb.id, s.id)) all.push(ev);
    assert.equal(text(all), "one\ntwo\n");
    assert.notEqual((await second.getSession(sb.id, s.id)).state, "running");
  });

  test("tty sessions: resize and signal", async () => {
    const sb = await sandbox();
    const s = await client.createSession(sb.id, ["sh", "-c", "sleep 60"], { tty: true, cols: 80, rows: 24 });
    await client.resize(sb.id, s.id, 100, 40);
    await client.signal(sb.id, s.id, "SIGKILL");
    const events = [];
    for await (const ev of client.attach(sb.id, s.id)) events.push(ev);
    const exit = events.at(-1);
    assert.equal(exit.type, "exit");
    assert.ok(exit.exitCode !== 0 || exit.error);
  });

  test("named snapshots, restore and branch", async () => {
    const sb = await sandbox();
    // On the root volume (/tmp may be a tmpfs, which a snapshot's files lack).
    const state = (await client.exec(sb.id, ["sh", "-c", 'echo "$HOME"'])).stdout.trim().replace(/\/$/, "") + "/state";
    await client.writeFile(sb.id, state, "before");
    assert.equal((await client.createSnapshot(sb.id, "sdk-snap")).name, "sdk-snap");
    await client.writeFile(sb.id, state, "after");
    assert.equal(dec(await client.readFile(sb.id, state, { snapshot: "sdk-snap" })), "before");
    assert.equal((await client.restore(sb.id, "sdk-snap")).state, "running");
    assert.equal(dec(await client.readFile(sb.id, state)), "before");
    const [br] = await client.branch(sb.id, 1);
    made.push(br.id);
    assert.equal((await client.waitSandbox(br.id, "running", 120)).state, "running");
    assert.equal(dec(await client.readFile(br.id, state)), "before");
    await client.deleteSnapshot(sb.id, "sdk-snap");
    assert.deepEqual(await client.listSnapshots(sb.id), []);
  });

  test("network policy: replace, and a bad entry is a 400 with a message", async () => {
    const sb = await sandbox({ network: "none" });
    const got = await client.setNetwork(sb.id, { allow_internet: false, allow: ["198.51.100.0/24"], deny: ["198.51.100.7"] });
    assert.deepEqual([got.network.allow, got.network.deny], [["198.51.100.0/24"], ["198.51.100.7/32"]]);
    await assert.rejects(client.setNetwork(sb.id, { allow: ["2001:db8::/32"] }), (e) => e instanceof APIError && e.code === 400 && e.message.length > 0);
  });

  test("volumes: files through the API and mounted into a sandbox", async () => {
    const vol = await client.createVolume(uniq("tsvol"), { size_mb: 64 });
    try {
      await client.mkdirVolume(vol.id, "/data");
      await client.writeVolumeFile(vol.id, "/data/hello", "from the api");
      assert.equal(dec(await client.readVolumeFile(vol.id, "/data/hello")), "from the api");
      assert.deepEqual((await client.listVolumeDir(vol.id, "/data")).entries.map((e) => e.name), ["hello"]);
      assert.ok((await client.listVolumes()).some((v) => v.id === vol.id));
      const sb = await sandbox({ volume_mounts: [{ volume: vol.name, path: "/mnt/vol" }] });
      assert.equal(dec(await client.readFile(sb.id, "/mnt/vol/data/hello")), "from the api");
      await assert.rejects(client.deleteVolume(vol.id), ConflictError);
      await client.deleteSandbox(sb.id);
      await client.removeVolumeFile(vol.id, "/data/hello");
      assert.equal((await client.getVolume(vol.id)).name, vol.name);
    } finally {
      await client.deleteVolume(vol.id).catch(() => {});
    }
    await assert.rejects(client.getVolume(vol.id), NotFoundError);
  });

  test("templates: list, get, the build log stream, pools, bad recipes", async () => {
    assert.ok((await client.listTemplates()).some((t) => t.name === TEMPLATE));
    assert.equal((await client.getTemplate(TEMPLATE)).name, TEMPLATE);
    const events = [];
    for await (const ev of client.templateLogs(TEMPLATE)) events.push(ev);
    assert.ok(events.at(-1).done);
    assert.equal(events.at(-1).template.name, TEMPLATE);
    const lines = events.filter((e) => !e.done);
    assert.deepEqual(lines.map((e) => e.index), lines.map((_, i) => i));
    assert.equal((await client.setPool(TEMPLATE, 0)).name, TEMPLATE);
    await assert.rejects(client.createTemplate("name: [unclosed", uniq("bad")), (e) => e instanceof APIError && e.code === 400);
    await assert.rejects(client.getTemplate(uniq("missing")), NotFoundError);
  });

  test("secrets, keys, projects, and another project's key sees nothing", async () => {
    const sb = await sandbox();
    const name = `SDK_TS_${randomBytes(3).toString("hex").toUpperCase()}`;
    assert.equal((await client.setSecret(name, "s3cret")).name, name);
    const secrets = await client.listSecrets();
    assert.ok(secrets.some((s) => s.name === name));
    assert.ok(secrets.every((s) => !("value" in s)));
    await client.deleteSecret(name);
    await assert.rejects(client.deleteSecret(name), NotFoundError);

    const project = uniq("sdkts");
    const key = await client.createKey(uniq("k"), { project });
    try {
      const other = new Client({ baseUrl: URL_, apiKey: key.key });
      assert.deepEqual(await other.listSandboxes(), []);
      await assert.rejects(other.getSandbox(sb.id), NotFoundError);
      await assert.rejects(other.listKeys(), (e) => e instanceof APIError && [401, 403].includes(e.code));
      assert.ok((await client.listProjects()).some((p) => p.name === project));
      await client.setProject(project, { max_sandboxes: 3 });
      assert.equal((await client.getProject(project)).name, project);
    } finally {
      await client.revokeKey(key.id);
    }
    assert.ok(!(await client.listKeys()).some((k) => k.id === key.id));
  });

  test("nodes", async () => {
    const nodes = await client.listNodes();
    assert.ok(nodes.length > 0);
    const node = await client.getNode(nodes[0].id);
    if (node.id === "local") {
      // space serve: one node in its own process; these need a cluster.
      for (const call of ["cordonNode", "uncordonNode", "drainNode", "removeNode"]) {
        await assert.rejects(client[call](node.id), (e) => e instanceof ConflictError && /needs a cluster/.test(e.message));
      }
    } else {
      assert.equal((await client.cordonNode(node.id)).state, "cordoned");
      assert.notEqual((await client.uncordonNode(node.id)).state, "cordoned");
    }
    await assert.rejects(client.removeNode(uniq("no-such-node")), NotFoundError);
    // The SDK is versioned with the server (internal/version).
    assert.deepEqual(await client.health(), { status: "ok", version: VERSION });
    assert.match(await client.serverMetrics(), /\S/);
  });
});

// A TCP proxy to the server that cuts every connection after `limit` bytes
// of answer: an attach through it keeps losing its connection.

function cuttingProxy(target, limit) {
  const u = new URL(target);
  const state = { connections: 0 };
  const server = createServer((down) => {
    state.connections++;
    const up = createConnection({ host: u.hostname, port: Number(u.port) });
    let sent = 0;
    down.pipe(up);
    up.on("data", (buf) => {
      const room = limit - sent;
      if (room <= 0) return;
      down.write(buf.subarray(0, room));
      sent += Math.min(room, buf.length);
      if (sent >= limit) { down.destroy(); up.destroy(); }
    });
    const end = () => { down.destroy(); up.destroy(); };
    up.on("end", end).on("error", end);
    down.on("error", end).on("close", end);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${server.address().port}`, state, close: () => server.close() })));
}

describe("live server, flaky network", { skip: URL_ ? false : "no SPACE_URL" }, () => {
  const client = new Client({ baseUrl: URL_, apiKey: KEY });

  test("attach survives connections cut in the middle, every byte once", async () => {
    const sb = await client.createSandbox(TEMPLATE, { wait: true });
    try {
      const s = await client.createSession(sb.id, ["sh", "-c", "for i in $(seq 1 40); do echo line-$i; sleep 0.02; done"]);
      const proxy = await cuttingProxy(URL_, 600);
      const events = [];
      try {
        const flaky = new Client({ baseUrl: proxy.url, apiKey: KEY });
        for await (const ev of flaky.attach(sb.id, s.id)) events.push(ev);
      } finally {
        proxy.close();
      }
      const want = Array.from({ length: 40 }, (_, i) => `line-${i + 1}\n`).join("");
      assert.equal(text(events), want);
      assert.equal(events.at(-1).exitCode, 0);
      assert.ok(proxy.state.connections > 2, "the proxy never cut the stream: the test proves nothing");
    } finally {
      await client.deleteSandbox(sb.id);
    }
  });

  test("network denials are reported", { skip: process.env.SPACE_TEST_WEB_DENIED_NAME ? false : "needs the fake web of test/e2e" }, async () => {
    const denied = process.env.SPACE_TEST_WEB_DENIED_NAME;
    const sb = await client.createSandbox(TEMPLATE, { wait: true, network: { deny: [denied] } });
    try {
      // busybox's nslookup asks the sandbox's gateway, which refuses the name.
      const out = await client.exec(sb.id, ["nslookup", denied]);
      assert.notEqual(out.exit_code, 0, JSON.stringify(out));
      let denials = [];
      for (let i = 0; i < 50 && !denials.length; i++) {
        denials = await client.networkDenials(sb.id);
        if (!denials.length) await new Promise((r) => setTimeout(r, 200));
      }
      assert.ok(denials.length && denials[0].message.includes(denied), JSON.stringify(await client.events(sb.id)));
    } finally {
      await client.deleteSandbox(sb.id);
    }
  });
});
