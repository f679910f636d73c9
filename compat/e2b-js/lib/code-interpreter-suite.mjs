// The code-interpreter compatibility suite: one @e2b/code-interpreter SDK,
// unmodified, through port 49999 of the proxy (E2b-Sandbox-Port), on space's
// code-interpreter-v1 template (the SDK's default template). The server
// needs it built: `go test ./test/e2e -run TestE2BJSSDKs` builds it; by
// hand, `space serve --build-templates
// minimal,base,code-interpreter-v1-runtimes,code-interpreter-v1`.
// Each kernel takes memory from the sandbox's 512 MiB: the tests remove a
// language's contexts when done with them.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'

// The charts E2B's code interpreter extracts from matplotlib figures, one
// figure of each kind, and what the SDK must see of each (result.chart).
const CHARTS = {
  bar: {
    code: `import matplotlib.pyplot as plt
plt.figure()
plt.bar(['A', 'B', 'C'], [100, 200, 300], label='Sold')
plt.xlabel('Authors')
plt.ylabel('Books (k)')
plt.title('Sales')
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'bar')
      assert.equal(chart.title, 'Sales')
      assert.equal(chart.x_label, 'Authors')
      assert.equal(chart.y_unit, 'k')
      assert.deepEqual(chart.elements.map((e) => [e.label, e.group, e.value]), [['A', 'Sold', 100], ['B', 'Sold', 200], ['C', 'Sold', 300]])
    },
  },
  line: {
    code: `import numpy as np, datetime
import matplotlib.pyplot as plt
plt.figure()
d = [datetime.datetime(2023, 9, 1) + datetime.timedelta(seconds=i) for i in range(100)]
x = np.linspace(0, 2 * np.pi, 100)
plt.plot(d, np.sin(x), label='sin(x)')
plt.plot(d, np.cos(x), label='cos(x)')
plt.xlabel('Time (s)')
plt.ylabel('Amplitude (Hz)')
plt.title('Plot of sin(x) and cos(x)')
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'line')
      assert.equal(chart.title, 'Plot of sin(x) and cos(x)')
      assert.equal(chart.x_scale, 'datetime')
      assert.equal(chart.y_scale, 'linear')
      assert.equal(chart.x_unit, 's')
      assert.equal(chart.y_unit, 'Hz')
      assert.ok(chart.x_ticks.every((t) => typeof t === 'string'))
      assert.ok(chart.y_ticks.every((t) => typeof t === 'number'))
      assert.ok(chart.x_tick_labels.every((t) => typeof t === 'string'))
      assert.equal(chart.elements.length, 2)
      const [sin, cos] = chart.elements
      assert.equal(sin.label, 'sin(x)')
      assert.equal(cos.label, 'cos(x)')
      assert.equal(sin.points.length, 100)
      assert.equal(new Date(sin.points[0][0] + 'Z').toISOString(), '2023-09-01T00:00:00.000Z')
      assert.ok(sin.points.every(([x, y]) => typeof x === 'string' && typeof y === 'number'))
    },
  },
  scatter: {
    code: `import matplotlib.pyplot as plt
plt.figure()
plt.scatter([1, 2, 3], [4, 5, 6], label='Dataset 1')
plt.xlabel('X')
plt.title('Scatter')
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'scatter')
      assert.equal(chart.x_label, 'X')
      assert.equal(chart.y_label, null)
      assert.deepEqual(chart.elements, [{ label: 'Dataset 1', points: [[1, 4], [2, 5], [3, 6]] }])
    },
  },
  pie: {
    code: `import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 8))
ax.pie([90, 10], labels=['No', 'No, in blue'], autopct='%1.1f%%', startangle=90)
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'pie')
      assert.equal(chart.title, 'Will I wake up early tomorrow?')
      assert.deepEqual(chart.elements, [
        { label: 'No', angle: 324, radius: 1 },
        { label: 'No, in blue', angle: 36, radius: 1 },
      ])
    },
  },
  box_and_whisker: {
    code: `import matplotlib.pyplot as plt
data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}
fig, ax = plt.subplots(figsize=(10, 6))
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'box_and_whisker')
      assert.equal(chart.title, 'Exam Scores Distribution')
      assert.equal(chart.x_unit, null)
      const boxes = chart.elements
      assert.deepEqual(boxes.map((b) => b.label), ['Class A', 'Class B', 'Class C'])
      assert.deepEqual(boxes.map((b) => b.outliers), [[], [76], []])
      assert.deepEqual(boxes.map((b) => b.min), [78, 84, 75])
      assert.deepEqual(boxes.map((b) => b.first_quartile), [85, 84.75, 79])
      assert.deepEqual(boxes.map((b) => b.median), [88, 88, 82])
      assert.deepEqual(boxes.map((b) => b.third_quartile), [90, 90.5, 86])
      assert.deepEqual(boxes.map((b) => b.max), [92, 95, 88])
    },
  },
  superchart: {
    code: `import matplotlib.pyplot as plt
import numpy as np
fig, axs = plt.subplots(1, 2, figsize=(10, 8))
fig.suptitle('Multiple Graphs Example')
x = np.linspace(0, 10, 100)
axs[0].plot(x, np.sin(x), 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter(np.random.rand(5), np.random.rand(5), label='Dataset 1')
axs[1].set_xlabel('X')
axs[1].set_ylabel('Y')
axs[1].set_title('Scatter Plot')
plt.show()`,
    check(chart) {
      assert.equal(chart.type, 'superchart')
      assert.equal(chart.title, 'Multiple Graphs Example')
      const [line, scatter] = chart.elements
      assert.equal(line.type, 'line')
      assert.equal(line.title, 'Sine Wave')
      assert.equal(line.x_label, null)
      assert.equal(line.elements[0].points.length, 100)
      assert.equal(scatter.type, 'scatter')
      assert.equal(scatter.x_label, 'X')
      assert.equal(scatter.elements[0].points.length, 5)
    },
  },
}

// Each language's kernel, by the names E2B's documentation uses: code that
// reads the create's envs and a result, then its cwd and an env var.
const LANGUAGES = {
  r: { code: 'cat(Sys.getenv("CI_GREETING"))\n1 + 1', stdout: ['hello'], text: '[1] 2', cwd: 'getwd()', cwdText: '[1] "/tmp"', env: 'Sys.getenv("CI_CALL")', envText: '[1] "call"' },
  js: { code: 'console.log(Deno.env.get("CI_GREETING"))\n1 + 1', stdout: ['hello\n'], text: '2', cwd: 'Deno.cwd()', cwdText: '"/tmp"', env: 'Deno.env.get("CI_CALL")', envText: '"call"' },
  ts: { code: 'const n: number = 21\nn * 2', stdout: [], text: '42', cwd: 'Deno.cwd()', cwdText: '"/tmp"', env: 'Deno.env.get("CI_CALL")', envText: '"call"' },
  bash: { code: 'echo $CI_GREETING', stdout: ['hello\n'], text: undefined, cwd: 'pwd', cwdOut: '/tmp\n', env: 'echo $CI_CALL', envOut: 'call\n' },
  java: { code: 'System.out.println(System.getenv("CI_GREETING"));\nint k = 6;\nk * 7', stdout: ['hello\n'], text: '42', cwd: 'System.getProperty("user.dir")', cwdText: '"/tmp"' },
}

// What a language's contexts are listed as.
const CONTEXT_LANGUAGE = { r: 'r', js: 'javascript', ts: 'typescript', bash: 'bash', java: 'java' }

export function defineCodeInterpreterSuite(label, sdk) {
  const { Sandbox, NotFoundError, TimeoutError } = sdk

  // The sandbox's kernels share its 512 MiB: a language's contexts go once
  // a test is done with them.
  async function removeContexts(sbx, language) {
    for (const c of await sbx.listCodeContexts()) {
      if (c.language === language) await sbx.removeCodeContext(c.id)
    }
  }

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

    test('streaming: stdout and stderr arrive while the code still runs', async () => {
      for (const [language, code] of [
        ['python', 'import sys, time\nprint("first", flush=True)\nprint("warn", file=sys.stderr, flush=True)\ntime.sleep(2)\nprint("second")'],
        ['bash', 'echo first; echo warn >&2; sleep 2; echo second'],
      ]) {
        const seen = []
        const began = Date.now()
        const out = await sbx.runCode(code, {
          language,
          onStdout: (m) => seen.push(['out', m.line, Date.now() - began]),
          onStderr: (m) => seen.push(['err', m.line, Date.now() - began]),
        })
        const took = Date.now() - began
        assert.deepEqual(out.logs.stdout.join(''), 'first\nsecond\n', language)
        assert.deepEqual(out.logs.stderr, ['warn\n'], language)
        const first = seen.find(([, line]) => line === 'first\n')
        assert.ok(first && first[2] < took - 1500, `${language}: "first" came at ${first?.[2]} ms of ${took} ms`)
      }
      await removeContexts(sbx, 'bash')
    })

    for (const [language, c] of Object.entries(LANGUAGES)) {
      test(`languages: ${language}, its default context and a context with cwd and envs`, async () => {
        const out = await sbx.runCode(c.code, { language })
        assert.equal(out.error, undefined, `${language}: ${JSON.stringify(out.error)}`)
        assert.deepEqual(out.logs.stdout, c.stdout)
        assert.equal(out.text, c.text)
        // One extra kernel at a time fits the sandbox's 512 MiB.
        await removeContexts(sbx, CONTEXT_LANGUAGE[language])

        const ctx = await sbx.createCodeContext({ language, cwd: '/tmp' })
        assert.equal(ctx.language, CONTEXT_LANGUAGE[language])
        assert.equal(ctx.cwd, '/tmp')
        const where = await sbx.runCode(c.cwd, { context: ctx })
        if (c.cwdOut) assert.equal(where.logs.stdout.join(''), c.cwdOut)
        else assert.equal(where.text, c.cwdText)
        if (c.env) {
          const env = await sbx.runCode(c.env, { context: ctx, envs: { CI_CALL: 'call' } })
          if (c.envOut) assert.equal(env.logs.stdout.join(''), c.envOut)
          else assert.equal(env.text, c.envText)
        }
        const failed = await sbx.runCode(language === 'bash' ? 'false' : language === 'r' ? 'stop("boom")' : language === 'java' ? '1/0' : 'throw new Error("boom")', { context: ctx })
        assert.ok(failed.error?.name, `${language}: no error: ${JSON.stringify(failed)}`)
        await removeContexts(sbx, CONTEXT_LANGUAGE[language])
      })
    }

    // After the languages: figures and DataFrames grow the python kernel,
    // and each other language's kernel needs its share of the 512 MiB.
    for (const [kind, { code, check }] of Object.entries(CHARTS)) {
      test(`charts: ${kind}, with its PNG`, async () => {
        const out = await sbx.runCode(code)
        assert.equal(out.error, undefined, JSON.stringify(out.error))
        assert.equal(out.results.length, 1)
        const [r] = out.results
        assert.equal(r.isMainResult, false)
        assert.match(r.png ?? '', /^iVBORw0KGgo/)
        assert.match(r.text ?? '', /^<Figure size/)
        assert.ok(r.formats().includes('png'), JSON.stringify(r.formats()))
        assert.ok(r.chart, 'no chart')
        check(r.chart)
      })
    }

    test('display data: a PNG image, a DataFrame (data, HTML), markdown and JSON', async () => {
      const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=='
      const img = await sbx.runCode(`import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode('${png}')))`)
      assert.equal(img.results.length, 1)
      assert.equal(img.results[0].png, png)
      assert.equal(img.results[0].chart, undefined)

      const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3]})')
      const [table] = df.results
      assert.equal(table.isMainResult, true)
      assert.deepEqual(table.data, { a: { 0: 1, 1: 2, 2: 3 } })
      assert.match(table.html ?? '', /<table/)

      const rich = await sbx.runCode('from IPython.display import Markdown, JSON, display\ndisplay(Markdown("**b**"))\ndisplay(JSON({"k": [1]}))')
      assert.equal(rich.results[0].markdown, '**b**')
      assert.deepEqual(rich.results[1].json, { k: [1] })
    })

    test('contexts: an invalid cwd or language is a 400, not a server error', async () => {
      for (const cwd of ['/does/not/exist', 'relative', '/etc/passwd', '/root']) {
        await assert.rejects(sbx.createCodeContext({ cwd }), (err) => /\b400\b/.test(err.message) && !/\b500\b/.test(err.message), cwd)
      }
      await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), /\b400\b/)
    })

    test('interrupts: a runCode that times out interrupts its kernel, and the next one runs', async () => {
      await sbx.runCode('kept = 7')
      await assert.rejects(sbx.runCode('import time\ntime.sleep(30)', { timeoutMs: 3_000 }), TimeoutError)
      const began = Date.now()
      const next = await sbx.runCode('1 + 1', { timeoutMs: 10_000 })
      assert.equal(next.text, '2')
      assert.ok(Date.now() - began < 8_000, `the next execution took ${Date.now() - began} ms`)
      assert.equal((await sbx.runCode('kept')).text, '7', 'the interrupt kept the kernel state')

      // The same in another language's kernel.
      const bash = await sbx.createCodeContext({ language: 'bash' })
      await assert.rejects(sbx.runCode('sleep 60', { context: bash, timeoutMs: 1_500 }), TimeoutError)
      assert.deepEqual((await sbx.runCode('echo next', { context: bash, timeoutMs: 10_000 })).logs.stdout, ['next\n'])
      await sbx.removeCodeContext(bash)
    })

    test('a sandbox killed during runCode fails it at once, with a descriptive error', async () => {
      const other = await Sandbox.create({ timeoutMs: 120_000 })
      try {
        const execution = other.runCode('import time\ntime.sleep(60)')
        const settled = execution.then(() => null, (err) => err)
        await new Promise((r) => setTimeout(r, 2_000))
        const killed = Date.now()
        await other.kill()
        const err = await settled
        assert.ok(Date.now() - killed < 10_000, `runCode failed ${Date.now() - killed} ms after the kill`)
        assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
        assert.match(err.message, /sandbox was killed while the request was in progress/)
      } finally {
        await other.kill().catch(() => {})
      }
    })
  })
}
