// Helpers of the lifecycle lane's tests (test/life-*.test.mjs): the
// templates they build through space's native API (SPACE_API_URL, the same
// key as E2B_API_KEY), from the recipes next to this file.
import { readFile } from 'node:fs/promises'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function native(method, path, body) {
  const base = process.env.SPACE_API_URL
  if (!base) throw new Error('SPACE_API_URL is not set: the life tests build templates through the native API')
  const res = await fetch(base + path, {
    method,
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return JSON.parse(text)
}

// lifeTemplate builds lib/<name>.yaml (once: the same recipe is the same
// template) and returns its name when it is ready.
export async function lifeTemplate(name) {
  const recipe = await readFile(new URL(`./${name}.yaml`, import.meta.url), 'utf8')
  await native('POST', '/v1/templates', { recipe })
  const deadline = Date.now() + 180_000
  for (;;) {
    const t = await native('GET', `/v1/templates/${name}`)
    if (t.state === 'ready') return t.name
    if (t.state === 'failed') throw new Error(`template ${name} failed: ${t.reason}`)
    if (Date.now() > deadline) throw new Error(`template ${name} not ready after 3 minutes: ${t.state}`)
    await sleep(500)
  }
}

// eventually retries fn until it returns a truthy value (or ms pass).
export async function eventually(fn, what, ms = 20_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`)
    await sleep(250)
  }
}
