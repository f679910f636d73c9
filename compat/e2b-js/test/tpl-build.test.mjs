// Templates built from code (issue 13, item 12): the unmodified SDKs'
// Template() builder and Template.build / buildInBackground /
// getBuildStatus / tags against space, which translates the build into a
// recipe and builds it in a gVisor build sandbox. From the base template,
// to stay fast.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import * as v251 from 'e2b-v251'
import * as v245 from 'e2b-v245'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function context() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tpl-ctx-'))
  fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from the context\n')
  fs.mkdirSync(path.join(dir, 'app', 'sub'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'app', 'config.json'), '{"ok":true}\n')
  fs.writeFileSync(path.join(dir, 'app', 'sub', 'deep.txt'), 'deep\n')
  fs.writeFileSync(path.join(dir, 'app', '.hidden'), 'hidden\n')
  return dir
}

for (const [label, sdk] of [['e2b@2.51', v251], ['e2b@2.45', v245]]) {
  const { Template, Sandbox, BuildError, waitForFile } = sdk

  describe(`${label} templates built from code`, { concurrency: 1 }, () => {
    const name = `tpl-${label.replace(/[^a-z0-9]/g, '')}-${process.pid}`
    let dir
    const sandboxes = []
    before(() => {
      dir = context()
    })
    after(async () => {
      for (const s of sandboxes) await s.kill().catch(() => {})
      fs.rmSync(dir, { recursive: true, force: true })
    })

    const create = async (t) => {
      const s = await Sandbox.create(t, { timeoutMs: 120_000 })
      sandboxes.push(s)
      return s
    }

    test('build: copy, run, env, workdir, user, start and ready commands', async () => {
      const tpl = Template({ fileContextPath: dir })
        .fromTemplate('base')
        .setUser('root')
        .setWorkdir('/srv/app')
        .copy('hello.txt', '/srv/app/')
        .copy('app', 'conf', { user: 'user', mode: 0o750 })
        // RUN_ID: the steps run for real each time, not from an earlier
        // run's template of the same content.
        .setEnvs({ GREETING: 'hi there', RUN_ID: `${process.pid}-${Date.now()}` })
        .runCmd('echo "$GREETING from $(whoami) in $(pwd)" > built.txt')
        .runCmd('whoami > ~/run-as; echo "$HOME" >> ~/run-as', { user: 'user' })
        .setUser('user')
        .setWorkdir('/home/user')
        .setStartCmd('echo started-by-$(whoami) > /tmp/started; sleep infinity', waitForFile('/tmp/started'))
      const logs = []
      const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(String(e.message)) })
      assert.equal(info.name, `${name}:v1`)
      assert.ok(info.buildId && info.templateId, JSON.stringify(info))
      assert.ok(logs.some((l) => l.includes('starting the build sandbox')), `build logs:\n${logs.join('\n')}`)

      const s = await create(name)
      const r = await s.commands.run(
        'cat /srv/app/hello.txt /srv/app/built.txt /home/user/run-as; ls -A /srv/app/conf; cat /srv/app/conf/sub/deep.txt;' +
          ' stat -c "%U %a" /srv/app/conf/config.json /srv/app/hello.txt; echo "$GREETING"; whoami; pwd; cat /tmp/started',
      )
      assert.equal(
        r.stdout,
        'hello from the context\nhi there from root in /srv/app\nuser\n/home/user\n' +
          '.hidden\nconfig.json\nsub\ndeep\n' +
          'user 750\nroot 644\nhi there\nuser\n/home/user\nstarted-by-user\n',
      )
      // The tag names the same template.
      const tagged = await create(`${name}:v1`)
      assert.equal((await tagged.commands.run('cat /srv/app/hello.txt')).stdout, 'hello from the context\n')
    })

    test('fromDockerfile: the instructions the SDK turns into steps', { skip: label !== 'e2b@2.51' && 'once is enough: the SDK parses the Dockerfile' }, async () => {
      const dockerfile = [
        'FROM e2bdev/base',
        'ENV APP_MODE=docker',
        'ARG BUILD_ARG=yes',
        'WORKDIR /app',
        'COPY hello.txt ./',
        `RUN echo "built in $(pwd) as $(whoami), $APP_MODE ${Date.now()}" > /app/built.txt`,
        'USER user',
        'CMD echo cmd-ran > /home/user/cmd.txt; sleep infinity',
      ].join('\n')
      const tpl = Template({ fileContextPath: dir }).fromDockerfile(dockerfile)
      await Template.build(tpl, `${name}-docker`)
      const s = await create(`${name}-docker`)
      const r = await s.commands.run('cat /app/hello.txt /app/built.txt; echo "$APP_MODE $BUILD_ARG"; whoami; pwd; cat ~/cmd.txt')
      assert.match(r.stdout, /^hello from the context\nbuilt in \/app as root, docker \d+\ndocker yes\nuser\n\/app\ncmd-ran\n$/)
    })

    test('a second build with the same files skips their upload', async () => {
      // Content of this run only: the files cache outlives runs.
      fs.writeFileSync(path.join(dir, 'again.txt'), `${label} ${process.pid} ${Date.now()}\n`)
      const tpl = Template({ fileContextPath: dir }).fromTemplate('base').copy('again.txt', '/srv/again.txt')
      const first = []
      await Template.build(tpl, `${name}-again`, { onBuildLogs: (e) => first.push(String(e.message)) })
      const second = []
      await Template.build(tpl, `${name}-again`, { onBuildLogs: (e) => second.push(String(e.message)) })
      assert.ok(first.some((l) => l.startsWith("Uploaded 'again.txt'")), first.join('\n'))
      assert.ok(second.some((l) => l.includes("Skipping upload of 'again.txt'")), second.join('\n'))
    })

    test('buildInBackground and getBuildStatus with logs', async () => {
      // Output of this run only: a step of the same content built
      // before (by the other SDK version, or an earlier run) is received
      // from the build cache and runs no command.
      const marker = `background-step-output-${name}-${Date.now()}`
      const tpl = Template().fromTemplate('base').runCmd(`echo ${marker}`)
      const data = await Template.buildInBackground(tpl, `${name}-bg`)
      let status
      const lines = []
      for (let i = 0; i < 600; i++) {
        status = await Template.getBuildStatus(data, { logsOffset: lines.length })
        lines.push(...status.logEntries.map((e) => e.message))
        if (status.status === 'ready' || status.status === 'error') break
        await sleep(200)
      }
      assert.equal(status.status, 'ready', JSON.stringify(status))
      assert.equal(status.buildID, data.buildId)
      assert.ok(lines.some((l) => l === marker), lines.join('\n'))
    })

    test('a failing step is a BuildError naming the reason', async () => {
      const tpl = Template().fromTemplate('base').runCmd('echo about to fail; exit 3')
      await assert.rejects(Template.build(tpl, `${name}-fails`), (err) => {
        assert.ok(err instanceof BuildError, `got ${err}`)
        assert.match(err.message, /exit (status|code) 3/)
        return true
      })
    })

    test('tags: list, assign, remove', async () => {
      const tags = await Template.getTags(name)
      assert.deepEqual(tags.map((t) => t.tag), ['v1'])
      assert.ok(tags[0].buildId)
      const assigned = await Template.assignTags(`${name}:v1`, ['prod', 'stable'])
      assert.equal(assigned.buildId, tags[0].buildId)
      assert.deepEqual((await Template.getTags(name)).map((t) => t.tag).sort(), ['prod', 'stable', 'v1'])
      const s = await create(`${name}:prod`)
      assert.equal((await s.commands.run('cat /srv/app/hello.txt')).stdout, 'hello from the context\n')
      await Template.removeTags(name, 'prod')
      assert.deepEqual((await Template.getTags(name)).map((t) => t.tag).sort(), ['stable', 'v1'])
      await assert.rejects(Sandbox.create(`${name}:prod`, { timeoutMs: 60_000 }))
    })
  })
}
