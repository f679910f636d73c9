// The lifecycle lane's SDK cases, run for each SDK that has the feature:
// pause without memory, metrics over time, the mcp create option.
import { describe, test, before } from 'node:test'
import assert from 'node:assert/strict'
import { lifeTemplate, eventually } from './life.mjs'

const bootIds = async (sbx) =>
  (await sbx.files.read('/home/user/starts')).trim().split('\n')

export function defineLifeSuite(label, sdk) {
  const { Sandbox } = sdk

  describe(`${label}: life`, { concurrency: 1 }, () => {
    let booted, mcp
    before(async () => {
      booted = await lifeTemplate('life-booted')
      mcp = await lifeTemplate('life-mcp')
    })

    test('pause({ keepMemory: false }) keeps the disk; connect boots afresh', async () => {
      const sbx = await Sandbox.create(booted, { timeoutMs: 180_000 })
      try {
        await sbx.files.write('/home/user/keep.txt', 'kept')
        const first = await eventually(async () => (await sbx.files.exists('/home/user/starts')) && bootIds(sbx), 'first boot recorded')
        assert.equal(first.length, 1)
        assert.equal(first[0], (await sbx.files.read('/proc/sys/kernel/random/boot_id')).trim())

        assert.equal(await sbx.pause({ keepMemory: false }), true)
        assert.equal((await sbx.getInfo()).state, 'paused')
        assert.equal(await sbx.pause({ keepMemory: false }), false, 'a second pause is refused as on E2B')

        const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 180_000 })
        assert.equal((await again.getInfo()).state, 'running')
        assert.equal(await again.files.read('/home/user/keep.txt'), 'kept')
        // The template's start command ran again, on a new kernel boot.
        const boots = await eventually(async () => { const b = await bootIds(again); return b.length === 2 && b }, 'second boot recorded')
        assert.notEqual(boots[1], boots[0], 'the boot id must change')
        assert.equal(boots[1], (await again.files.read('/proc/sys/kernel/random/boot_id')).trim())

        // A pause that keeps memory does not reboot.
        assert.equal(await again.pause(), true)
        const third = await Sandbox.connect(sbx.sandboxId)
        assert.deepEqual(await bootIds(third), boots)
      } finally {
        await sbx.kill().catch(() => {})
      }
    })

    test('lifecycle.onTimeout { pause, keepMemory: false }: the timeout keeps the disk', async () => {
      const sbx = await Sandbox.create(booted, { timeoutMs: 3_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
      try {
        await eventually(async () => (await sbx.files.exists('/home/user/starts')), 'first boot recorded')
        await eventually(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', 'paused by the timeout', 60_000)
        const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
        const boots = await eventually(async () => { const b = await bootIds(again); return b.length === 2 && b }, 'second boot recorded')
        assert.notEqual(boots[1], boots[0])
        // autoResume cannot go with it: the SDK refuses, and so does space.
        await assert.rejects(Sandbox.create(booted, { lifecycle: { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true } }))
      } finally {
        await sbx.kill().catch(() => {})
      }
    })

    test('getMetrics({ start, end }) answers the samples inside the range', async () => {
      const created = new Date()
      const sbx = await Sandbox.create('minimal', { timeoutMs: 120_000 })
      try {
        const all = await eventually(async () => { const m = await sbx.getMetrics(); return m.length >= 2 && m }, 'two samples', 30_000)
        for (const m of all) {
          assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp), `timestamp ${m.timestamp}`)
          assert.ok(m.timestamp.getTime() >= Math.floor(created.getTime() / 1000) * 1000 - 1000, `${m.timestamp} before ${created}`)
          assert.ok(m.cpuCount >= 1 && m.memTotal > 0 && m.memUsed <= m.memTotal && m.diskTotal > 0, JSON.stringify(m))
          assert.equal(typeof m.memCache, 'number')
        }
        assert.ok(all[1].timestamp - all[0].timestamp >= 3000, 'samples are 5 s apart (give or take a busy host)')

        const one = await sbx.getMetrics({ start: all[1].timestamp, end: all[1].timestamp })
        assert.equal(one.length, 1)
        assert.equal(one[0].timestamp.getTime(), all[1].timestamp.getTime())

        const earlier = await Sandbox.getMetrics(sbx.sandboxId, {
          start: new Date(created.getTime() - 7_200_000), end: new Date(created.getTime() - 3_600_000),
        })
        assert.deepEqual(earlier, [], 'nothing from before the sandbox existed')
      } finally {
        await sbx.kill().catch(() => {})
      }
    })

    test('mcp: the template gateway starts; getMcpUrl and getMcpToken reach it', async () => {
      const servers = { exa: { apiKey: 'k-123' } }
      const sbx = await Sandbox.create(mcp, { mcp: servers, timeoutMs: 120_000 })
      try {
        const url = new URL(sbx.getMcpUrl())
        assert.equal(url.pathname, '/mcp')
        assert.ok(url.host.startsWith(`50005-${sbx.sandboxId}.`), url.host)
        const token = await sbx.getMcpToken()
        assert.ok(token, 'the SDK made a token')

        // Through the proxy as a client of that URL would.
        const call = (tok) => fetch(`${process.env.E2B_SANDBOX_URL}/mcp`, {
          method: 'POST',
          headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '50005', Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        })
        const ok = await call(token)
        assert.equal(ok.status, 200)
        assert.deepEqual((await ok.json()).result.servers, servers)
        assert.equal((await call('wrong')).status, 401)

        // connect() does not know the token; it reads the gateway's copy.
        const other = await Sandbox.connect(sbx.sandboxId)
        assert.equal(await other.getMcpToken(), token)
      } finally {
        await sbx.kill().catch(() => {})
      }
    })

    test('mcp on a template without a gateway is a clear 400', async () => {
      await assert.rejects(Sandbox.create('minimal', { mcp: { exa: { apiKey: 'k' } } }), (err) => {
        assert.match(err.message, /provides no MCP gateway/)
        return true
      })
      // Without a template the SDKs ask for mcp-gateway, which space lacks.
      await assert.rejects(Sandbox.create({ mcp: { exa: { apiKey: 'k' } } }), (err) => {
        assert.match(err.message, /no built-in mcp-gateway template/)
        return true
      })
    })
  })
}
