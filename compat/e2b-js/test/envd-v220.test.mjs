// An SDK from before envd 0.6 (e2b 2.20) against the 0.6.4 agent: files
// that carry metadata list, stat, rename and watch as before (the unknown
// EntryInfo field is ignored), and its writes, which send no metadata,
// replace a file's metadata with none, as envd 0.6 does for such writes.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import * as old from 'e2b-v220'
import * as current from 'e2b-v251'
import { TEMPLATE, eventually } from '../lib/suite.mjs'
import { ENVD_VERSION, xattrs } from '../lib/envd.mjs'

describe(`e2b@2.20 against envd ${ENVD_VERSION}`, { concurrency: 1 }, () => {
  let sbx, same
  before(async () => {
    sbx = await old.Sandbox.create(TEMPLATE, { timeoutMs: 300_000 })
    same = await current.Sandbox.connect(sbx.sandboxId)
  })
  after(async () => {
    await sbx?.kill().catch(() => {})
  })

  test('files with metadata through the old SDK', async () => {
    await same.files.write('/home/user/old/tagged.txt', 'tagged', { metadata: { owner: 'new-sdk' } })
    const stat = await sbx.files.getInfo('/home/user/old/tagged.txt')
    assert.equal(stat.type, old.FileType.FILE)
    assert.equal(stat.size, 6)
    const listed = await sbx.files.list('/home/user/old')
    assert.deepEqual(listed.map((e) => e.name), ['tagged.txt'])
    await sbx.files.rename('/home/user/old/tagged.txt', '/home/user/old/renamed.txt')
    assert.deepEqual((await same.files.getInfo('/home/user/old/renamed.txt')).metadata, { owner: 'new-sdk' })

    const events = []
    const handle = await sbx.files.watchDir('/home/user/old', (e) => events.push(e))
    try {
      const w = await sbx.files.write('/home/user/old/renamed.txt', 'rewritten by 2.20')
      assert.equal(w.path, '/home/user/old/renamed.txt')
      await eventually(() => assert.ok(events.some((e) => e.name === 'renamed.txt'), JSON.stringify(events)), 'watch event')
    } finally {
      await handle.stop()
    }
    assert.equal((await same.files.getInfo('/home/user/old/renamed.txt')).metadata, undefined)
    assert.deepEqual(await xattrs(sbx, '/home/user/old/renamed.txt'), {})
    assert.equal(await sbx.files.read('/home/user/old/renamed.txt'), 'rewritten by 2.20')
  })
})
