// Volumes through an unmodified E2B JS SDK: the Volume class's management
// and file operations, volumeMounts on Sandbox.create, two sandboxes
// sharing a volume, pause/connect, and the refusals. The SDK sends volume
// content requests to E2B_VOLUME_API_URL (https://api.<domain> when
// unset): a self-hosted user points it at space's E2B API, as here.
import { describe, test, after } from 'node:test'
import assert from 'node:assert/strict'

export const TEMPLATE = process.env.E2B_TEMPLATE ?? 'base'
process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

export function defineVolumeSuite(label, sdk) {
  const { Sandbox, Volume, VolumeError, FileType, NotFoundError } = sdk
  // e2b 2.20 raises NotFoundError for both; later versions have their own.
  const VolumeNotFoundError = sdk.VolumeNotFoundError ?? NotFoundError
  const VolumePathNotFoundError = sdk.VolumePathNotFoundError ?? NotFoundError

  describe(`${label} volumes`, { concurrency: 1 }, () => {
    const name = `vol-js-${label.replace(/[^a-z0-9]/gi, '')}-${process.pid}`.toLowerCase().replace(/^vol-/, 'js-')
    const sandboxes = []
    let vol
    after(async () => {
      for (const s of sandboxes) await s.kill().catch(() => {})
      if (vol) await Volume.destroy(vol.volumeId).catch(() => {})
    })

    test('create, list, getInfo, connect', async () => {
      vol = await Volume.create(name)
      assert.ok(vol.volumeId.startsWith('vol-'), vol.volumeId)
      assert.equal(vol.name, name)
      assert.ok(vol.token, 'a volume token')
      const listed = await Volume.list()
      assert.ok(listed.some((v) => v.volumeId === vol.volumeId && v.name === name), JSON.stringify(listed))
      const info = await Volume.getInfo(vol.volumeId)
      assert.equal(info.name, name)
      assert.equal(info.token, vol.token)
      const again = await Volume.connect(vol.volumeId)
      assert.equal(again.name, name)
      await assert.rejects(Volume.getInfo('vol-doesnotexist'), (err) => err instanceof VolumeNotFoundError)
      await assert.rejects(Volume.create(name), (err) => err instanceof VolumeError, 'a second volume of the same name')
    })

    test('file operations without a sandbox', async () => {
      const w = await vol.writeFile('/docs/readme.txt', 'hello volume')
      assert.equal(w.name, 'readme.txt')
      assert.equal(w.type, 'file')
      assert.equal(w.size, 12)
      assert.equal(await vol.readFile('/docs/readme.txt'), 'hello volume')
      const bytes = await vol.readFile('/docs/readme.txt', { format: 'bytes' })
      assert.equal(Buffer.from(bytes).toString(), 'hello volume')
      const dir = await vol.makeDir('/docs/sub')
      assert.equal(dir.type, 'directory')
      await assert.rejects(vol.makeDir('/docs/sub'), (err) => err instanceof VolumeError)
      await vol.makeDir('/docs/sub', { force: true })
      await assert.rejects(vol.makeDir('/no/such/parent'), (err) => err instanceof VolumePathNotFoundError)
      const listing = await vol.list('/docs')
      assert.deepEqual(listing.map((e) => e.name).sort(), ['readme.txt', 'sub'])
      assert.ok(listing.every((e) => e.mtime instanceof Date && !isNaN(e.mtime)))
      const deep = await vol.list('/', { depth: 3 })
      assert.ok(deep.some((e) => e.path === '/docs/readme.txt'), JSON.stringify(deep.map((e) => e.path)))
      assert.equal(await vol.exists('/docs/readme.txt'), true)
      assert.equal(await vol.exists('/docs/missing'), false)
      const st = await vol.getInfo('/docs/readme.txt')
      assert.equal(st.size, 12)
      const changed = await vol.updateMetadata('/docs/readme.txt', { mode: 0o600, uid: 1000, gid: 1000 })
      assert.equal(changed.mode & 0o777, 0o600)
      assert.equal(changed.uid, 1000)
      await vol.writeFile('/docs/gone.txt', 'x')
      await vol.remove('/docs/gone.txt')
      await assert.rejects(vol.readFile('/docs/gone.txt'), (err) => err instanceof VolumePathNotFoundError)
      await assert.rejects(vol.remove('/docs/gone.txt'), (err) => err instanceof VolumePathNotFoundError)
      // .. stops at the volume's top.
      assert.equal(await vol.readFile('/../../docs/readme.txt'), 'hello volume')
      // The token alone reaches the files; a wrong one does not.
      const stranger = new Volume(vol.volumeId, name, 'not-the-token')
      await assert.rejects(stranger.readFile('/docs/readme.txt'), (err) => /invalid volume token/.test(err.message))
    })

    test('two sandboxes mount it and see each other; files API and volume API agree', async () => {
      const a = await Sandbox.create(TEMPLATE, { volumeMounts: { '/mnt/shared': vol }, timeoutMs: 300_000 })
      sandboxes.push(a)
      const b = await Sandbox.create(TEMPLATE, { volumeMounts: { '/home/user/data': name }, timeoutMs: 300_000 })
      sandboxes.push(b)
      assert.equal(await a.files.read('/mnt/shared/docs/readme.txt'), 'hello volume')
      await a.files.write('/mnt/shared/from-a.txt', 'written in a')
      assert.equal((await b.commands.run('cat /home/user/data/from-a.txt')).stdout, 'written in a')
      await b.commands.run('echo from b > /home/user/data/from-b.txt')
      assert.equal(await a.files.read('/mnt/shared/from-b.txt'), 'from b\n')
      assert.equal(await vol.readFile('/from-b.txt'), 'from b\n')
      // A replaced file reads new in the sandbox that read it before.
      await vol.writeFile('/from-a.txt', 'replaced through the volume API')
      assert.equal((await a.commands.run('cat /mnt/shared/from-a.txt')).stdout, 'replaced through the volume API')
      const entries = await b.files.list('/home/user/data')
      assert.ok(entries.some((e) => e.name === 'from-a.txt' && e.type === FileType.FILE))
      const info = await a.getInfo()
      assert.deepEqual(info.volumeMounts, [{ name, path: '/mnt/shared' }])
      const running = await Sandbox.list({ query: { state: ['running'] } }).nextItems()
      const mine = running.find((s) => s.sandboxId === b.sandboxId)
      assert.ok(mine, 'b is listed')
      assert.deepEqual(mine.volumeMounts, [{ name, path: '/home/user/data' }])
      // Deleting a mounted volume is refused.
      await assert.rejects(Volume.destroy(vol.volumeId), (err) => err instanceof VolumeError && /mounted/.test(err.message))
    })

    test('pause keeps the mount; connect finds what was written meanwhile', async () => {
      const a = sandboxes[0]
      await a.pause()
      await vol.writeFile('/while-paused.txt', 'meanwhile')
      const back = await Sandbox.connect(a.sandboxId)
      assert.equal((await back.commands.run('cat /mnt/shared/while-paused.txt')).stdout, 'meanwhile')
    })

    test('refused mounts', async () => {
      for (const path of ['/proc', '/', '/etc', 'relative', '/.space/x']) {
        await assert.rejects(Sandbox.create(TEMPLATE, { volumeMounts: { [path]: vol } }), (err) => !/timed? ?out/i.test(err.message), `mount at ${path}`)
      }
      await assert.rejects(Sandbox.create(TEMPLATE, { volumeMounts: { '/mnt/x': 'no-such-volume' } }))
    })

    test('destroy once no sandbox mounts it', async () => {
      for (const s of sandboxes.splice(0)) await s.kill()
      assert.equal(await Volume.destroy(vol.volumeId), true)
      assert.equal(await Volume.destroy(vol.volumeId), false)
      // Its token died with it.
      await assert.rejects(vol.readFile('/docs/readme.txt'), (err) => /invalid volume token/.test(err.message))
      vol = undefined
    })
  })
}
