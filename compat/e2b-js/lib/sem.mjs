// E2B's semantics the SDKs rely on, through one unmodified SDK: auto-resume
// only when asked for, traffic during a pause in progress, listing order
// and paging, the proxy's not-found answer, template aliases.
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY come from the environment.
import { describe, test, after } from 'node:test'
import assert from 'node:assert/strict'

export const TEMPLATE = process.env.E2B_TEMPLATE ?? 'base'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// envdGet sends GET path to a sandbox's envd through the proxy, as the SDKs
// address it with E2B_SANDBOX_URL, and returns status and parsed body.
async function envdGet(sandboxId, path, port = 49983) {
  const res = await fetch(process.env.E2B_SANDBOX_URL + path, {
    headers: { 'E2b-Sandbox-Id': sandboxId, 'E2b-Sandbox-Port': String(port) },
  })
  const text = await res.text()
  let body
  try {
    body = JSON.parse(text)
  } catch {
    body = text
  }
  return { status: res.status, body }
}

// notFound is E2B's proxy answer for a sandbox it cannot route to.
const notFound = (sandboxId) => ({ sandboxId, message: 'The sandbox was not found', code: 502 })

export function defineSemSuite(label, sdk, { order = true } = {}) {
  const { Sandbox, Template } = sdk

  describe(`${label} semantics`, { concurrency: 1 }, () => {
    const tag = `sem-${label}-${process.pid}-${Date.now()}`
    const made = []
    const create = async (opts = {}) => {
      const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 300_000, ...opts, metadata: { sem: tag, ...(opts.metadata ?? {}) } })
      made.push(sbx)
      return sbx
    }
    after(async () => {
      await Promise.all(made.map((s) => s.kill().catch(() => {})))
    })

    test('auto-resume is off unless asked for: traffic does not wake a paused sandbox, connect() does', async () => {
      const sbx = await create()
      assert.equal((await sbx.getInfo()).lifecycle?.autoResume ?? false, false)
      await sbx.files.write('/home/user/kept.txt', 'kept')
      assert.equal(await sbx.pause(), true)

      // The SDK's own health check, envd calls and the raw proxy answer
      // leave it paused.
      assert.equal(await sbx.isRunning(), false)
      await assert.rejects(sbx.commands.run('true'))
      await assert.rejects(sbx.files.read('/home/user/kept.txt'))
      assert.deepEqual(await envdGet(sbx.sandboxId, '/health'), { status: 502, body: notFound(sbx.sandboxId) })
      assert.equal((await sbx.getInfo()).state, 'paused')

      await sbx.connect()
      assert.equal((await sbx.getInfo()).state, 'running')
      assert.equal(await sbx.isRunning(), true)
      assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept')
    })

    test('lifecycle.autoResume: true wakes a paused sandbox on traffic', async () => {
      const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
      assert.equal((await sbx.getInfo()).lifecycle.autoResume, true)
      await sbx.files.write('/home/user/kept.txt', 'kept')
      assert.equal(await sbx.pause(), true)
      assert.equal((await sbx.getInfo()).state, 'paused')
      assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept')
      assert.equal((await sbx.getInfo()).state, 'running')
      assert.equal(await sbx.isRunning(), true)
    })

    test('traffic while an auto-resumable sandbox is being paused waits, then resumes it', async () => {
      const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
      await sbx.files.write('/home/user/during.txt', 'during')
      const pausing = sbx.pause()
      // getInfo says paused from the moment the suspend starts.
      const deadline = Date.now() + 10_000
      while ((await sbx.getInfo()).state !== 'paused') {
        assert.ok(Date.now() < deadline, 'the pause never started')
        await sleep(20)
      }
      const r = await sbx.commands.run('cat /home/user/during.txt')
      assert.equal(r.stdout, 'during')
      assert.equal(await pausing, true)
      assert.equal((await sbx.getInfo()).state, 'running')
    })

    test('list: newest first, order asc/desc, stable paging across running and paused', async () => {
      const ltag = `${tag}-list`
      const a = await create({ metadata: { list: ltag } })
      const b = await create({ metadata: { list: ltag } })
      const c = await create({ metadata: { list: ltag } })
      assert.equal(await b.pause(), true)
      const ids = (items) => items.map((s) => s.sandboxId)
      const all = async (opts) => {
        const p = Sandbox.list({ query: { metadata: { list: ltag } }, ...opts })
        const out = []
        while (p.hasNext) out.push(...(await p.nextItems()))
        return out
      }
      const newest = [c.sandboxId, b.sandboxId, a.sandboxId]
      assert.deepEqual(ids(await all()), newest)
      assert.deepEqual(ids(await all({ limit: 1 })), newest)
      assert.deepEqual(ids(await all({ limit: 2, query: { metadata: { list: ltag }, state: ['running'] } })), [c.sandboxId, a.sandboxId])
      assert.deepEqual(ids(await all({ query: { metadata: { list: ltag }, state: ['paused'] } })), [b.sandboxId])
      if (order) {
        assert.deepEqual(ids(await all({ order: 'desc', limit: 2 })), newest)
        assert.deepEqual(ids(await all({ order: 'asc', limit: 1 })), [...newest].reverse())
      }

      // A page boundary survives a state change and a kill in between.
      const p = Sandbox.list({ query: { metadata: { list: ltag } }, limit: 1 })
      const seen = ids(await p.nextItems())
      await b.connect() // paused → running
      seen.push(...ids(await p.nextItems()))
      await c.kill() // already listed
      while (p.hasNext) seen.push(...ids(await p.nextItems()))
      assert.deepEqual(seen, newest)
    })

    test('an unknown or killed sandbox through the proxy: E2B\'s not-found', async () => {
      const sbx = await create()
      await sbx.kill()
      assert.equal(await sbx.isRunning(), false)
      for (const port of [49983, 49999, 8080]) {
        assert.deepEqual(await envdGet(sbx.sandboxId, '/health', port), { status: 502, body: notFound(sbx.sandboxId) })
      }
      assert.deepEqual(await envdGet('nosuchsandbox0000000', '/'), { status: 502, body: notFound('nosuchsandbox0000000') })
    })

    test('Template.exists: base is there, an unknown alias is not', async () => {
      assert.equal(await Template.exists('base'), true)
      assert.equal(await Template.exists(`no-such-template-${process.pid}`), false)
      await assert.rejects(Template.exists('Not A Name'))
    })
  })
}
