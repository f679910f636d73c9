// The SDK against docs/openapi.yaml: every operation of the spec (method +
// path) has an entry in the mapping table, and every entry a method on
// Client. Offline: no server needed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { Client, OPERATIONS } from "../dist/index.js";

const spec = readFileSync(new URL("../../../docs/openapi.yaml", import.meta.url), "utf8");

// (operationId, METHOD, path) of every operation, read from the paths
// section by indentation (the file keeps one regular style; a YAML library
// is not worth a dependency for this).
function specOperations() {
  const ops = [];
  let path, method, inPaths = false;
  for (const line of spec.split("\n")) {
    if (/^\S/.test(line)) { inPaths = line.startsWith("paths:"); continue; }
    if (!inPaths) continue;
    let m = /^  (\/\S*):\s*$/.exec(line);
    if (m) { path = m[1]; method = undefined; continue; }
    m = /^    ([a-z]+):/.exec(line);
    if (m && ["get", "put", "post", "delete", "patch", "head", "options"].includes(m[1])) {
      method = m[1].toUpperCase();
      ops.push({ id: undefined, method, path });
      continue;
    }
    m = /^      operationId:\s*(\S+)/.exec(line);
    if (m && method) ops[ops.length - 1].id = m[1];
  }
  return ops;
}

test("the spec parses into operations", () => {
  const ops = specOperations();
  assert.ok(ops.length > 50, `${ops.length} operations`);
  assert.deepEqual(ops.filter((o) => !o.id), []);
});

test("every operation of docs/openapi.yaml is mapped", () => {
  const mapped = new Set(Object.values(OPERATIONS).map((o) => `${o.method} ${o.path}`));
  const missing = specOperations().filter((o) => !mapped.has(`${o.method} ${o.path}`));
  assert.deepEqual(missing, [], "operations with no SDK method: add them to src/ops.ts");
});

test("the mapping agrees with the spec", () => {
  const byId = new Map(specOperations().map((o) => [o.id, `${o.method} ${o.path}`]));
  const wrong = Object.entries(OPERATIONS).filter(([id, o]) => byId.get(id) !== `${o.method} ${o.path}`);
  assert.deepEqual(wrong, []);
});

test("every mapped method exists on Client", () => {
  const missing = Object.entries(OPERATIONS).filter(([, o]) => typeof Client.prototype[o.sdkMethod] !== "function");
  assert.deepEqual(missing, []);
});

test("the package ships ESM with type declarations", () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.type, "module");
  assert.equal(pkg.exports["."].types, "./dist/index.d.ts");
  const dts = readFileSync(new URL("../dist/client.d.ts", import.meta.url), "utf8");
  assert.match(dts, /attach\(id: string, sid: string/);
});
