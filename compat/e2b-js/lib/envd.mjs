// The envd 0.6 surface (file metadata, watch events with the entry,
// allowNetworkMounts) through one unmodified SDK that gates on it
// (e2b ≥ 2.45), against a live space server.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { TEMPLATE, eventually } from './suite.mjs'

export const ENVD_VERSION = '0.6.4'

// xattrs reads a file's xattrs from inside the sandbox, as any process
// there (getfattr, a build tool) would see them.
export async function xattrs(sbx, path) {
  const py = `import os,json,sys; p=sys.argv[1]; print(json.dumps({n: os.getxattr(p, n).decode() for n in os.listxattr(p)}))`
  const r = await sbx.commands.run(`python3 -c '${py}' ${path}`)
  return JSON.parse(r.stdout)
}

export function defineEnvdSuite(label, sdk, { template = TEMPLATE } = {}) {
  const { Sandbox, FileType, FilesystemEventType } = sdk

  describe(`${label}: envd ${ENVD_VERSION}`, { concurrency: 1 }, () => {
    let sbx
    before(async () => {
      sbx = await Sandbox.create(template, { timeoutMs: 300_000 })
    })
    after(async () => {
      await sbx?.kill().catch(() => {})
    })

    test('the API reports the envd version the agent implements', async () => {
      assert.equal((await sbx.getInfo()).envdVersion, ENVD_VERSION)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).envdVersion, ENVD_VERSION)
    })

    test('file metadata: write (multipart and octet-stream), getInfo, list, rename, overwrite', async () => {
      const want = { author: 'mish', purpose: 'weekly report' }
      // Header names are case-insensitive, so keys come back lowercased.
      const info = await sbx.files.write('/home/user/meta/report.txt', 'v1', { metadata: { author: 'mish', Purpose: 'weekly report' } })
      assert.equal(info.path, '/home/user/meta/report.txt')
      assert.deepEqual(info.metadata, want)
      const raw = await sbx.files.write('/home/user/meta/raw.bin', new Uint8Array([1, 2, 3]).buffer, {
        metadata: { kind: 'binary' },
        useOctetStream: true,
      })
      assert.deepEqual(raw.metadata, { kind: 'binary' })
      const many = await sbx.files.write(
        [
          { path: '/home/user/meta/many/one.txt', data: '1' },
          { path: '/home/user/meta/many/two.txt', data: '2' },
        ],
        { metadata: { batch: '7' } },
      )
      assert.deepEqual(many.map((f) => f.metadata), [{ batch: '7' }, { batch: '7' }])

      // Stored as xattrs in envd's namespace, visible inside the sandbox.
      assert.deepEqual(await xattrs(sbx, '/home/user/meta/report.txt'), {
        'user.e2b.author': 'mish',
        'user.e2b.purpose': 'weekly report',
      })

      assert.deepEqual((await sbx.files.getInfo('/home/user/meta/report.txt')).metadata, want)
      const listed = await sbx.files.list('/home/user/meta', { depth: 2 })
      const byName = Object.fromEntries(listed.map((e) => [e.name, e]))
      assert.deepEqual(byName['report.txt'].metadata, want)
      assert.deepEqual(byName['raw.bin'].metadata, { kind: 'binary' })
      assert.deepEqual(byName['two.txt'].metadata, { batch: '7' })
      assert.equal(byName['many'].metadata, undefined)
      assert.equal(byName['many'].type, FileType.DIR)

      const moved = await sbx.files.rename('/home/user/meta/report.txt', '/home/user/meta/archive/report.txt')
      assert.deepEqual(moved.metadata, want)
      assert.deepEqual((await sbx.files.getInfo('/home/user/meta/archive/report.txt')).metadata, want)

      // Overwrite replaces the whole set; without metadata it clears it.
      const v2 = await sbx.files.write('/home/user/meta/archive/report.txt', 'v2', { metadata: { author: 'alice' } })
      assert.deepEqual(v2.metadata, { author: 'alice' })
      const v3 = await sbx.files.write('/home/user/meta/archive/report.txt', 'v3')
      assert.equal(v3.metadata, undefined)
      assert.equal((await sbx.files.getInfo('/home/user/meta/archive/report.txt')).metadata, undefined)
      assert.equal(await sbx.files.read('/home/user/meta/archive/report.txt'), 'v3')

      // Set from inside the sandbox: the SDK sees it too.
      await sbx.commands.run(`python3 -c 'import os; os.setxattr("/home/user/meta/raw.bin", "user.e2b.origin", b"inside")'`)
      assert.deepEqual((await sbx.files.getInfo('/home/user/meta/raw.bin')).metadata, { kind: 'binary', origin: 'inside' })
    })

    test('file metadata: a set too large for a file is refused and nothing is written', async () => {
      await assert.rejects(
        sbx.files.write('/home/user/meta/huge.txt', 'x', { metadata: { a: 'a'.repeat(3000), b: 'b'.repeat(3000) } }),
        (err) => {
          assert.match(err.message, /metadata/)
          return true
        },
      )
      assert.equal(await sbx.files.exists('/home/user/meta/huge.txt'), false)
      // The SDK itself refuses what HTTP headers cannot carry.
      await assert.rejects(sbx.files.write('/home/user/meta/bad.txt', 'x', { metadata: { 'bad key': 'v' } }))
    })

    test('watchDir with includeEntry: events carry the entry, metadata included', async () => {
      await sbx.files.makeDir('/home/user/watched-entry')
      const events = []
      const handle = await sbx.files.watchDir('/home/user/watched-entry', (e) => events.push(e), { includeEntry: true })
      try {
        await sbx.files.write('/home/user/watched-entry/new.txt', 'hello', { metadata: { tag: 'w' } })
        await sbx.files.makeDir('/home/user/watched-entry/sub')
        await eventually(() => {
          const ev = events.find((e) => e.name === 'new.txt' && e.entry?.metadata?.tag === 'w')
          assert.ok(ev, JSON.stringify(events))
          assert.equal(ev.entry.path, '/home/user/watched-entry/new.txt')
          assert.equal(ev.entry.type, FileType.FILE)
          assert.equal(ev.entry.size, 5)
          const dir = events.find((e) => e.name === 'sub' && e.type === FilesystemEventType.CREATE)
          assert.ok(dir?.entry, JSON.stringify(events))
          assert.equal(dir.entry.type, FileType.DIR)
        }, 'watch events with entries')
        await sbx.files.remove('/home/user/watched-entry/new.txt')
        await eventually(() => {
          const ev = events.find((e) => e.name === 'new.txt' && e.type === FilesystemEventType.REMOVE)
          assert.ok(ev, JSON.stringify(events))
          assert.equal(ev.entry, undefined) // gone: nothing to describe
        }, 'remove event')
      } finally {
        await handle.stop()
      }

      // Without includeEntry, events stay as before.
      const plain = []
      const h2 = await sbx.files.watchDir('/home/user/watched-entry', (e) => plain.push(e))
      try {
        await sbx.files.write('/home/user/watched-entry/plain.txt', 'x')
        await eventually(() => assert.ok(plain.some((e) => e.name === 'plain.txt'), JSON.stringify(plain)), 'plain event')
        assert.ok(plain.every((e) => e.entry === undefined), JSON.stringify(plain))
      } finally {
        await h2.stop()
      }
    })

    test('file metadata survives pause and connect, and a fork', async () => {
      await sbx.files.write('/home/user/kept/tagged.txt', 'kept', { metadata: { keep: 'yes' } })
      assert.equal(await sbx.pause(), true)
      const again = await Sandbox.connect(sbx.sandboxId)
      assert.deepEqual((await again.files.getInfo('/home/user/kept/tagged.txt')).metadata, { keep: 'yes' })
      if (typeof again.fork !== 'function') return // e2b < 2.35
      const [f] = await again.fork({ count: 1, timeoutMs: 120_000 })
      assert.ok(!(f instanceof Error), String(f))
      try {
        assert.deepEqual((await f.files.getInfo('/home/user/kept/tagged.txt')).metadata, { keep: 'yes' })
      } finally {
        await f.kill()
      }
    })

    test('watchDir with allowNetworkMounts on a local directory', async () => {
      const events = []
      const handle = await sbx.files.watchDir('/home/user', (e) => events.push(e), { allowNetworkMounts: true, recursive: true })
      try {
        await sbx.files.write('/home/user/watched-entry/net.txt', 'x')
        await eventually(() => assert.ok(events.some((e) => e.name === 'watched-entry/net.txt'), JSON.stringify(events)), 'event')
      } finally {
        await handle.stop()
      }
    })
  })
}
