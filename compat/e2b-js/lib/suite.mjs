// The compatibility suite: one E2B JS SDK, unmodified, against a live
// space server. E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY come from the
// environment (see docs/e2b.md); E2B_TEMPLATE defaults to base, which has
// the /bin/bash the SDKs hard-code for commands.run.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'

export const TEMPLATE = process.env.E2B_TEMPLATE ?? 'base'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// eventually retries fn until it stops throwing (or 10 s pass).
export async function eventually(fn, what) {
  const deadline = Date.now() + 10_000
  for (;;) {
    try {
      return await fn()
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: ${err.message}`, { cause: err })
      await sleep(100)
    }
  }
}

export function defineSuite(label, sdk, { fork = false } = {}) {
  const { Sandbox, CommandExitError, FileType } = sdk

  describe(label, { concurrency: 1 }, () => {
    const tag = `${label}-${process.pid}-${Date.now()}`
    let sbx

    before(async () => {
      sbx = await Sandbox.create(TEMPLATE, {
        metadata: { suite: tag },
        envs: { SUITE_GREETING: 'hello' },
        timeoutMs: 300_000,
      })
    })
    after(async () => {
      await sbx?.kill().catch(() => {})
    })

    test('create with metadata and env; getInfo', async () => {
      const r = await sbx.commands.run('echo $SUITE_GREETING; whoami; pwd')
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'hello\nuser\n/home/user\n')
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.metadata.suite, tag)
      assert.equal(info.state, 'running')
      assert.ok(info.endAt > info.startedAt)
      assert.ok(await sbx.isRunning())
    })

    test('commands: foreground, exit codes, background, stdin, kill, list, connect', async () => {
      await assert.rejects(sbx.commands.run('echo oops >&2; exit 7'), (err) => {
        assert.ok(err instanceof CommandExitError, `got ${err}`)
        assert.equal(err.exitCode, 7)
        assert.equal(err.stderr, 'oops\n')
        return true
      })

      const chunks = []
      const bg = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.1; done', {
        background: true,
        onStdout: (d) => chunks.push(d),
      })
      const bgResult = await bg.wait()
      assert.equal(bgResult.stdout, 'line1\nline2\nline3\n')
      assert.equal(chunks.join(''), 'line1\nline2\nline3\n')

      const cat = await sbx.commands.run('cat', { background: true, stdin: true })
      await sbx.commands.sendStdin(cat.pid, 'through stdin\n')
      await sbx.commands.closeStdin(cat.pid)
      assert.equal((await cat.wait()).stdout, 'through stdin\n')

      const sleeper = await sbx.commands.run('sleep 300', { background: true })
      const listed = await sbx.commands.list()
      assert.ok(listed.some((p) => p.pid === sleeper.pid), `pid ${sleeper.pid} not in ${JSON.stringify(listed)}`)
      assert.equal(await sbx.commands.kill(sleeper.pid), true)
      await assert.rejects(sleeper.wait())
      assert.equal(await sbx.commands.kill(sleeper.pid), false)

      const counter = await sbx.commands.run('for i in 1 2 3 4 5; do echo n$i; sleep 0.2; done', { background: true })
      await counter.disconnect()
      const attached = await sbx.commands.connect(counter.pid)
      const attachedResult = await attached.wait()
      assert.match(attachedResult.stdout, /n5\n$/)
    })

    test('files: text, binary, multiple, list depth, exists, getInfo, makeDir, rename, remove', async () => {
      const info = await sbx.files.write('/home/user/notes/a.txt', 'text content')
      assert.equal(info.path, '/home/user/notes/a.txt')
      assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'text content')
      assert.equal(await sbx.files.read('notes/a.txt'), 'text content') // relative to home

      const binary = new Uint8Array([0, 1, 2, 200, 255])
      await sbx.files.write('/home/user/notes/bin.dat', binary.buffer)
      assert.deepEqual(new Uint8Array(await sbx.files.read('/home/user/notes/bin.dat', { format: 'bytes' })), binary)

      const many = await sbx.files.write([
        { path: '/home/user/notes/deep/one.txt', data: '1' },
        { path: '/home/user/notes/deep/two.txt', data: '2' },
      ])
      assert.equal(many.length, 2)

      const shallow = await sbx.files.list('/home/user/notes')
      assert.deepEqual(shallow.map((e) => e.name).sort(), ['a.txt', 'bin.dat', 'deep'])
      const deep = await sbx.files.list('/home/user/notes', { depth: 2 })
      assert.ok(deep.some((e) => e.path === '/home/user/notes/deep/two.txt'))

      assert.equal(await sbx.files.exists('/home/user/notes/a.txt'), true)
      assert.equal(await sbx.files.exists('/home/user/notes/missing'), false)
      const stat = await sbx.files.getInfo('/home/user/notes/a.txt')
      assert.equal(stat.type, FileType.FILE)
      assert.equal(stat.size, 'text content'.length)
      assert.equal((await sbx.files.getInfo('/home/user/notes/deep')).type, FileType.DIR)

      assert.equal(await sbx.files.makeDir('/home/user/made'), true)
      assert.equal(await sbx.files.makeDir('/home/user/made'), false)
      await sbx.files.rename('/home/user/notes/a.txt', '/home/user/made/b.txt')
      assert.equal(await sbx.files.read('/home/user/made/b.txt'), 'text content')
      await sbx.files.remove('/home/user/made')
      assert.equal(await sbx.files.exists('/home/user/made'), false)
    })

    test('files: watchDir', async () => {
      await sbx.files.makeDir('/home/user/watched')
      const events = []
      const handle = await sbx.files.watchDir('/home/user/watched', (e) => events.push(e))
      await sbx.files.write('/home/user/watched/new.txt', 'x')
      await eventually(() => assert.ok(events.some((e) => e.name === 'new.txt'), JSON.stringify(events)), 'watch event')
      await handle.stop()
    })

    test('files: signed upload and download URLs', async () => {
      const upload = await sbx.uploadUrl('/home/user/uploaded.txt')
      const form = new FormData()
      form.append('file', new Blob(['via signed url']), '/home/user/uploaded.txt')
      const up = await fetch(upload, { method: 'POST', body: form })
      assert.equal(up.status, 200, await up.clone().text())
      const down = await fetch(await sbx.downloadUrl('/home/user/uploaded.txt'))
      assert.equal(down.status, 200)
      assert.equal(await down.text(), 'via signed url')
      const forged = new URL(await sbx.downloadUrl('/home/user/uploaded.txt'))
      forged.searchParams.set('path', '/etc/shadow')
      assert.notEqual((await fetch(forged)).status, 200)
    })

    test('pty: create, sendInput, resize', async () => {
      let out = ''
      const decoder = new TextDecoder()
      const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += decoder.decode(d)) })
      const send = (s) => sbx.pty.sendInput(pty.pid, new TextEncoder().encode(s))
      await send('echo pty-$((6*7))\n')
      await eventually(() => assert.match(out, /pty-42/), 'pty output')
      await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
      await send('stty size\n')
      await eventually(() => assert.match(out, /30 100/), 'pty size')
      await send('exit\n')
      await pty.wait().catch(() => {})
    })

    test('metrics, list with filters, setTimeout', async () => {
      const metrics = await sbx.getMetrics()
      assert.ok(metrics.length >= 1 && metrics[0].memTotal > 0, JSON.stringify(metrics))

      const page = Sandbox.list({ query: { metadata: { suite: tag }, state: ['running'] } })
      const items = await page.nextItems()
      assert.deepEqual(items.map((s) => s.sandboxId), [sbx.sandboxId])
      assert.equal(page.hasNext, false)
      const none = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['paused'] } }).nextItems()
      assert.equal(none.length, 0)

      const before = (await sbx.getInfo()).endAt
      await sbx.setTimeout(900_000)
      assert.ok((await sbx.getInfo()).endAt > before)
    })

    test('pause, then connect: files and a running process intact', async () => {
      await sbx.files.write('/home/user/kept.txt', 'kept across pause')
      // The first tick before the pause: the loop may not have written
      // one by then, and the read after the resume would find no file.
      await sbx.commands.run('date +%s%N > /home/user/tick')
      const ticker = await sbx.commands.run('while true; do date +%s%N > /home/user/tick.new; mv /home/user/tick.new /home/user/tick; sleep 0.1; done', { background: true })
      await ticker.disconnect()
      assert.equal(await sbx.pause(), true)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
      assert.equal(await sbx.pause(), false) // already paused: 409 → false

      const again = await Sandbox.connect(sbx.sandboxId)
      assert.equal((await again.getInfo()).state, 'running')
      assert.equal(await again.files.read('/home/user/kept.txt'), 'kept across pause')
      assert.ok((await again.commands.list()).some((p) => p.pid === ticker.pid), 'ticker survived')
      const t1 = await again.files.read('/home/user/tick')
      await sleep(400)
      assert.notEqual(await again.files.read('/home/user/tick'), t1)
      await again.commands.kill(ticker.pid)
    })

    test('snapshots', async () => {
      await sbx.files.write('/home/user/snap.txt', 'at snapshot')
      const snap = await sbx.createSnapshot()
      assert.ok(snap.snapshotId)
      const listed = await sbx.listSnapshots().nextItems()
      assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId))
      const restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
      try {
        assert.equal(await restored.files.read('/home/user/snap.txt'), 'at snapshot')
      } finally {
        await restored.kill()
      }
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    })

    test('fork', { skip: fork ? false : 'fork needs e2b ≥ 2.35' }, async () => {
      await sbx.files.write('/home/user/fork.txt', 'before fork')
      const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
      assert.equal(forks.length, 2)
      try {
        for (const f of forks) {
          assert.ok(!(f instanceof Error), String(f))
          assert.notEqual(f.sandboxId, sbx.sandboxId)
          assert.equal(await f.files.read('/home/user/fork.txt'), 'before fork')
          assert.equal((await f.commands.run('hostname')).stdout.trim(), f.sandboxId)
        }
      } finally {
        await Promise.all(forks.map((f) => (f instanceof Error ? null : f.kill())))
      }
    })

    test('kill', async () => {
      const id = sbx.sandboxId
      await sbx.kill()
      assert.equal(await Sandbox.kill(id), false)
      assert.equal(await sbx.isRunning(), false)
      await assert.rejects(Sandbox.getInfo(id))
      sbx = undefined
    })
  })
}
