// The code-interpreter compatibility suite: one @e2b/code-interpreter SDK,
// unmodified, through port 49999 of the proxy (E2b-Sandbox-Port), on space's
// code-interpreter-v1 template (the SDK's default template). The server
// needs it built: `go test ./test/e2e -run TestE2BJSSDKs` builds it; by
// hand, `space serve --build-templates minimal,base,code-interpreter-v1`.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'

export function defineCodeInterpreterSuite(label, sdk) {
  const { Sandbox, NotFoundError } = sdk

  describe(label, { concurrency: 1 }, () => {
    let sbx

    before(async () => {
      try {
        sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { CI_GREETING: 'hello' } })
      } catch (err) {
        if (/not found/i.test(String(err))) {
          throw new Error(`the code-interpreter-v1 template is not built on this server (${err.message})`, { cause: err })
        }
        throw err
      }
    })
    after(async () => {
      await sbx?.kill().catch(() => {})
    })

    test('runCode: stdout, main result, state kept between calls', async () => {
      const seen = []
      const out = await sbx.runCode('x = 6 * 7\nprint("hi")\nx', { onStdout: (m) => seen.push(m.line) })
      assert.deepEqual(out.logs.stdout, ['hi\n'])
      assert.deepEqual(out.logs.stderr, [])
      assert.deepEqual(seen, ['hi\n'])
      assert.equal(out.text, '42')
      assert.equal(out.error, undefined)
      assert.ok(out.executionCount >= 1, `executionCount ${out.executionCount}`)

      const kept = await sbx.runCode('x + 1')
      assert.equal(kept.text, '43')
      assert.equal(kept.executionCount, out.executionCount + 1)
      const py = await sbx.runCode('x + 2', { language: 'python' })
      assert.equal(py.text, '44')
    })

    test('runCode: rich results (HTML display and main result, a dict as text)', async () => {
      const results = []
      const out = await sbx.runCode(
        'from IPython.display import HTML, display\ndisplay(HTML("<b>shown</b>"))\nHTML("<b>hi</b>")',
        { onResult: (r) => results.push(r) },
      )
      assert.equal(out.results.length, 2)
      assert.equal(results.length, 2)
      const [shown, main] = out.results
      assert.equal(shown.isMainResult, false)
      assert.equal(shown.html, '<b>shown</b>')
      assert.equal(main.isMainResult, true)
      assert.equal(main.html, '<b>hi</b>')
      assert.ok(main.formats().includes('html'), JSON.stringify(main.formats()))

      const dict = await sbx.runCode('{"a": 1, "b": [2, 3]}')
      assert.equal(dict.text, "{'a': 1, 'b': [2, 3]}")
      assert.equal(dict.results[0].isMainResult, true)
    })

    test('runCode: an error', async () => {
      const errors = []
      const failed = await sbx.runCode('print("before")\n1/0', { onError: (e) => errors.push(e) })
      assert.equal(failed.error?.name, 'ZeroDivisionError')
      assert.equal(failed.error?.value, 'division by zero')
      assert.match(failed.error?.traceback ?? '', /ZeroDivisionError/)
      assert.deepEqual(failed.logs.stdout, ['before\n'])
      assert.equal(errors.length, 1)
      assert.equal(failed.text, undefined)
      // The kernel lives on.
      assert.equal((await sbx.runCode('x')).text, '42')
    })

    test('runCode: envs from create and per call', async () => {
      assert.equal((await sbx.runCode('import os\nos.environ["CI_GREETING"]')).text, 'hello')
      const call = await sbx.runCode('os.environ["CI_GREETING"] + " " + os.environ["CI_CALL"]', {
        envs: { CI_GREETING: 'hi', CI_CALL: 'there' },
      })
      assert.equal(call.text, 'hi there')
      const after = await sbx.runCode('os.environ["CI_GREETING"] + " " + os.environ.get("CI_CALL", "unset")')
      assert.equal(after.text, 'hello unset')
    })

    test('contexts: create, list, run in one, restart, remove', async () => {
      const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
      assert.ok(ctx.id)
      assert.equal(ctx.language, 'python')
      assert.equal(ctx.cwd, '/tmp')

      const listed = await sbx.listCodeContexts()
      assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp'), JSON.stringify(listed))
      assert.ok(listed.length >= 2, 'the default context is listed too')

      const inCtx = await sbx.runCode('import os\nmine = 1\nos.getcwd()', { context: ctx })
      assert.equal(inCtx.text, '/tmp')
      assert.equal((await sbx.runCode('mine + 1', { context: ctx })).text, '2')
      assert.equal((await sbx.runCode('mine')).error?.name, 'NameError') // not in the default context

      await sbx.restartCodeContext(ctx)
      assert.equal((await sbx.runCode('mine', { context: ctx })).error?.name, 'NameError')

      await sbx.removeCodeContext(ctx.id)
      assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
      await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError)
      await assert.rejects(sbx.restartCodeContext(ctx), NotFoundError)
    })
  })
}
