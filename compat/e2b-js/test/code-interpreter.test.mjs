// @e2b/code-interpreter 2.8: port 49999 through the proxy (E2b-Sandbox-Port).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

test('code interpreter: runCode with stdout, a rich result and an error', async (t) => {
  let sbx
  try {
    sbx = await Sandbox.create({ timeoutMs: 300_000 })
  } catch (err) {
    if (/not found/i.test(String(err))) {
      t.skip('the code-interpreter-v1 template is not built on this server')
      return
    }
    throw err
  }
  try {
    const out = await sbx.runCode('x = 6 * 7\nprint("hi")\nx')
    assert.deepEqual(out.logs.stdout, ['hi\n'])
    assert.equal(out.text, '42')
    const kept = await sbx.runCode('x + 1')
    assert.equal(kept.text, '43')
    const failed = await sbx.runCode('1/0')
    assert.equal(failed.error?.name, 'ZeroDivisionError')
  } finally {
    await sbx.kill()
  }
})
