// The audit of issue 13: the public methods and options of the E2B JS SDK
// that no other suite exercises, each through the unmodified SDK against
// a live space server. What passes here is a regression test; what space
// refuses by design is asserted to be refused clearly (docs/e2b.md, "What
// is supported", says why).
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { TEMPLATE, eventually } from './suite.mjs'

export function defineAuditSuite(label, sdk, { git = false, reboot = false, client = false, httpsPorts = false } = {}) {
  const { Sandbox, FileType, CommandExitError } = sdk

  describe(`${label} audit`, { concurrency: 1 }, () => {
    const tag = `audit-${label}-${process.pid}-${Date.now()}`
    const made = []
    let sbx

    before(async () => {
      sbx = await Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 300_000 })
      made.push(sbx)
    })
    after(async () => {
      for (const s of made) await s.kill().catch(() => {})
    })

    test('getInfo fields; getFullInfo; getHost', async () => {
      const info = await Sandbox.getInfo(sbx.sandboxId)
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.state, 'running')
      assert.ok(info.templateId, 'templateId')
      assert.ok(info.cpuCount >= 1 && info.memoryMB >= 128, `cpu ${info.cpuCount} mem ${info.memoryMB}`)
      assert.match(info.envdVersion, /^0\.\d+\.\d+$/)
      assert.ok(info.startedAt instanceof Date && info.endAt > info.startedAt)
      assert.deepEqual(info.metadata, { audit: tag })
      if (Sandbox.getFullInfo) {
        const full = await Sandbox.getFullInfo(sbx.sandboxId)
        assert.equal(full.sandboxId, sbx.sandboxId)
      }
      const host = sbx.getHost(8080)
      assert.ok(host.includes('8080') && host.includes(sbx.sandboxId), host)
    })

    test('list: query by metadata and state, paginator', async () => {
      const pager = Sandbox.list({ query: { metadata: { audit: tag }, state: ['running'] }, limit: 1 })
      assert.equal(pager.hasNext, true)
      const first = await pager.nextItems()
      assert.deepEqual(first.map((s) => s.sandboxId), [sbx.sandboxId])
      assert.equal(first[0].metadata.audit, tag)
      if (pager.hasNext) assert.deepEqual(await pager.nextItems(), [])
      assert.equal(pager.hasNext, false)
      const none = Sandbox.list({ query: { metadata: { audit: tag }, state: ['paused'] } })
      assert.deepEqual(await none.nextItems(), [])
    })

    test('commands: cwd, envs, user root, timeout, streaming callbacks, stdin close', async () => {
      const r = await sbx.commands.run('pwd; echo $A; id -un', { cwd: '/tmp', envs: { A: 'b' }, user: 'root' })
      assert.equal(r.stdout, '/tmp\nb\nroot\n')
      const out = []
      await sbx.commands.run('for i in 1 2 3; do echo $i; done; echo e >&2', {
        onStdout: (d) => out.push(`o:${d}`),
        onStderr: (d) => out.push(`e:${d}`),
      })
      assert.equal(out.filter((l) => l.startsWith('o:')).join('').replace(/o:/g, ''), '1\n2\n3\n')
      assert.ok(out.includes('e:e\n'), out.join('|'))
      await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), (err) => !(err instanceof CommandExitError) || err.exitCode !== 0)
      const h = await sbx.commands.run('cat', { background: true, stdin: true })
      await sbx.commands.sendStdin(h.pid, 'piped\n')
      if (sbx.commands.supportsStdinClose !== undefined) {
        assert.equal(sbx.commands.supportsStdinClose, true)
        await sbx.commands.closeStdin(h.pid)
        const done = await h.wait()
        assert.equal(done.stdout, 'piped\n')
      } else {
        await h.kill()
      }
    })

    test('pty: create, sendInput, resize, connect, kill', async () => {
      const seen = []
      const decoder = new TextDecoder()
      const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => seen.push(decoder.decode(d)), timeoutMs: 30_000 })
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
      await eventually(() => assert.match(seen.join(''), /24 80/), 'stty size')
      await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
      await eventually(() => assert.match(seen.join(''), /30 100/), 'resized')
      if (sbx.pty.connect) {
        const again = []
        const h2 = await sbx.pty.connect(pty.pid, { onData: (d) => again.push(decoder.decode(d)) })
        await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo re$((1+1))\n'))
        await eventually(() => assert.match(again.join(''), /re2/), 'connected pty output')
        await h2.disconnect()
      }
      assert.equal(await sbx.pty.kill(pty.pid), true)
    })

    test('files: writeFiles, read formats, exists, getInfo, rename, remove, recursive watch', async () => {
      const base = `/tmp/audit-${process.pid}`
      await sbx.files.makeDir(`${base}/sub`)
      if (sbx.files.writeFiles) {
        const infos = await sbx.files.writeFiles([
          { path: `${base}/a.txt`, data: 'alpha' },
          { path: `${base}/sub/b.bin`, data: new Uint8Array([0, 1, 2, 255]) },
        ])
        assert.equal(infos.length, 2)
      } else {
        await sbx.files.write(`${base}/a.txt`, 'alpha')
        await sbx.files.write(`${base}/sub/b.bin`, new Uint8Array([0, 1, 2, 255]).buffer)
      }
      assert.equal(await sbx.files.read(`${base}/a.txt`), 'alpha')
      assert.deepEqual([...(await sbx.files.read(`${base}/sub/b.bin`, { format: 'bytes' }))], [0, 1, 2, 255])
      const blob = await sbx.files.read(`${base}/a.txt`, { format: 'blob' })
      assert.equal(await blob.text(), 'alpha')
      const stream = await sbx.files.read(`${base}/a.txt`, { format: 'stream' })
      let text = ''
      for await (const chunk of stream) text += new TextDecoder().decode(chunk)
      assert.equal(text, 'alpha')
      assert.equal(await sbx.files.exists(`${base}/a.txt`), true)
      assert.equal(await sbx.files.exists(`${base}/nope`), false)
      const st = await sbx.files.getInfo(`${base}/sub`)
      assert.equal(st.type, FileType.DIR)
      const events = []
      const w = await sbx.files.watchDir(base, (e) => events.push(e), { recursive: true })
      await sbx.files.write(`${base}/sub/c.txt`, 'x')
      await eventually(() => assert.ok(events.some((e) => e.name.endsWith('c.txt')), JSON.stringify(events)), 'recursive watch event')
      await w.stop()
      const moved = await sbx.files.rename(`${base}/a.txt`, `${base}/z.txt`)
      assert.equal(moved.path, `${base}/z.txt`)
      await sbx.files.remove(base)
      assert.equal(await sbx.files.exists(base), false)
    })

    test('uploadUrl and downloadUrl with signature expiration', async () => {
      const up = await sbx.uploadUrl('/tmp/audit-signed.txt', { useSignatureExpiration: 60 })
      const form = new FormData()
      form.append('file', new Blob(['signed']), 'audit-signed.txt')
      const res = await fetch(up, { method: 'POST', body: form })
      assert.equal(res.status, 200, await res.text())
      const down = await sbx.downloadUrl('/tmp/audit-signed.txt', { useSignatureExpiration: 60 })
      const got = await fetch(down)
      assert.equal(got.status, 200)
      assert.equal(await got.text(), 'signed')
    })

    test('setTimeout moves endAt; static kill of an unknown id is false', async () => {
      await sbx.setTimeout(600_000)
      const info = await sbx.getInfo()
      assert.ok(info.endAt.getTime() - Date.now() > 500_000, `endAt ${info.endAt.toISOString()}`)
      assert.equal(await Sandbox.kill('nosuchsandbox0'), false)
    })

    test('betaPause (deprecated alias of pause) and connect resume the sandbox', { skip: !sdk.Sandbox.prototype.betaPause }, async () => {
      const s = await Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 120_000 })
      made.push(s)
      await s.commands.run('echo kept > /home/user/kept')
      await s.betaPause()
      assert.equal((await s.getInfo()).state, 'paused')
      const back = await Sandbox.connect(s.sandboxId)
      assert.equal((await back.commands.run('cat /home/user/kept')).stdout, 'kept\n')
    })

    test("connect({onResume: 'reboot'}) cold-boots a paused sandbox, files intact", { skip: !reboot }, async () => {
      const s = await Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 120_000 })
      made.push(s)
      const bootID = async (x) => (await x.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
      const before = await bootID(s)
      await s.commands.run('echo durable > /home/user/durable; sync')
      const bg = await s.commands.run('sleep 600', { background: true })
      await s.pause()
      const back = await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
      assert.notEqual(await bootID(back), before, 'a reboot has a new boot id')
      assert.equal((await back.commands.run('cat /home/user/durable')).stdout, 'durable\n')
      const procs = await back.commands.list()
      assert.ok(!procs.some((p) => p.pid === bg.pid && p.cmd === 'sleep'), 'processes are gone')
      // On a running sandbox the option changes nothing.
      const still = await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
      assert.equal(await bootID(still), await bootID(back))
    })

    test('git: init, configureUser, add, commit, status, branches, clone from a local remote', { skip: !git }, async () => {
      const repo = `/home/user/audit-repo-${process.pid}`
      await sbx.git.init(repo, { initialBranch: 'main' })
      await sbx.git.configureUser('Audit', 'audit@example.com', { path: repo, scope: 'local' }).catch(async () => {
        await sbx.git.configureUser('Audit', 'audit@example.com')
      })
      await sbx.files.write(`${repo}/README`, 'hi')
      let st = await sbx.git.status(repo)
      assert.equal(st.currentBranch, 'main')
      assert.ok(st.fileStatus?.length >= 1 || st.untracked >= 1 || JSON.stringify(st).includes('README'), JSON.stringify(st))
      await sbx.git.add(repo, { all: true })
      await sbx.git.commit(repo, 'first', { authorName: 'Audit', authorEmail: 'audit@example.com' })
      st = await sbx.git.status(repo)
      assert.equal(st.isClean ?? (st.fileStatus?.length === 0), true, JSON.stringify(st))
      await sbx.git.createBranch(repo, 'feature')
      const br = await sbx.git.branches(repo)
      assert.ok(br.branches.includes('main') && br.branches.includes('feature'), JSON.stringify(br))
      assert.equal(br.currentBranch, 'feature')
      await sbx.git.checkoutBranch(repo, 'main')
      await sbx.git.deleteBranch(repo, 'feature')
      const clone = `${repo}-clone`
      await sbx.git.clone(`file://${repo}`, { path: clone })
      assert.equal(await sbx.files.read(`${clone}/README`), 'hi')
      assert.equal(await sbx.git.remoteGet(clone, 'origin'), `file://${repo}`)
    })

    test('errors a new user meets: missing file, command, process, sandbox', async () => {
      const { NotFoundError, SandboxNotFoundError, FileNotFoundError } = sdk
      await assert.rejects(sbx.files.read('/nonexistent/file'), (err) => {
        assert.ok(err instanceof (FileNotFoundError ?? NotFoundError) || err instanceof NotFoundError, `${err.name}: ${err.message}`)
        return true
      })
      await assert.rejects(sbx.commands.run('definitely-not-a-command'), (err) => {
        assert.ok(err instanceof CommandExitError, `${err.name}: ${err.message}`)
        assert.equal(err.exitCode, 127)
        return true
      })
      assert.equal(await sbx.commands.kill(999999), false)
      assert.equal(await sbx.pty.kill(999999), false)
      assert.equal(await sbx.files.makeDir('/tmp'), false)
      await assert.rejects(Sandbox.connect('nosuchsandbox0'), (err) => {
        assert.ok(err instanceof (SandboxNotFoundError ?? NotFoundError) || err instanceof NotFoundError, `${err.name}: ${err.message}`)
        return true
      })
      await assert.rejects(Sandbox.getInfo('nosuchsandbox0'), (err) => err instanceof NotFoundError || /not found/i.test(err.message))
      await assert.rejects(Sandbox.setTimeout('nosuchsandbox0', 10_000), (err) => err instanceof NotFoundError || /not found/i.test(err.message))
    })

    test('relative paths are the user\'s home; list depth; a 12 MiB file round-trips', async () => {
      await sbx.files.write('rel-audit.txt', 'home')
      assert.equal((await sbx.commands.run('cat /home/user/rel-audit.txt')).stdout, 'home')
      assert.equal(await sbx.files.read('rel-audit.txt'), 'home')
      await sbx.files.makeDir('/tmp/deep/a/b')
      const one = await sbx.files.list('/tmp/deep')
      assert.deepEqual(one.map((e) => e.name), ['a'])
      const two = await sbx.files.list('/tmp/deep', { depth: 2 })
      assert.deepEqual(two.map((e) => e.path).sort(), ['/tmp/deep/a', '/tmp/deep/a/b'])
      const big = new Uint8Array(12 << 20)
      for (let i = 0; i < big.length; i += 4096) big[i] = i % 251
      await sbx.files.write('/tmp/big.bin', big.buffer)
      const back = await sbx.files.read('/tmp/big.bin', { format: 'bytes' })
      assert.equal(back.length, big.length)
      assert.ok(back.every((b, i) => b === big[i]), 'content')
      const sum = await sbx.commands.run('stat -c %s /tmp/big.bin')
      assert.equal(sum.stdout.trim(), String(12 << 20))
    })

    test('list by template and startedAfter; a killed sandbox is gone from the list', async () => {
      const mine = async (query) => {
        const out = []
        const p = Sandbox.list({ query: { metadata: { audit: tag }, ...query } })
        while (p.hasNext) out.push(...(await p.nextItems()))
        return out.map((s) => s.sandboxId)
      }
      assert.ok((await mine({ template: TEMPLATE })).includes(sbx.sandboxId))
      assert.ok(!(await mine({ template: 'minimal' })).includes(sbx.sandboxId))
      const info = await sbx.getInfo()
      assert.ok((await mine({ startedAfter: new Date(info.startedAt.getTime() - 1000) })).includes(sbx.sandboxId))
      assert.ok(!(await mine({ startedAfter: new Date(Date.now() + 60_000) })).includes(sbx.sandboxId))
      const s = await Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 60_000 })
      await s.kill()
      assert.ok(!(await mine({})).includes(s.sandboxId))
      assert.equal(await s.isRunning(), false)
    })

    test('defaults: no template is base; root file operations; a sandbox ends at its timeout', async () => {
      const s = await Sandbox.create({ metadata: { audit: tag }, timeoutMs: 4_000 })
      made.push(s)
      assert.equal((await s.getInfo()).templateId !== undefined, true)
      assert.equal((await s.commands.run('test -x /bin/bash && echo bash')).stdout, 'bash\n')
      await s.files.write('/root/secret.txt', 'root only', { user: 'root' })
      assert.equal(await s.files.read('/root/secret.txt', { user: 'root' }), 'root only')
      await assert.rejects(s.files.read('/root/secret.txt'), (err) => /permission|denied|not found/i.test(err.message))
      // 2.45 sends connect a 300 s timeout unless told (E2B then keeps the
      // sandbox that long); 2.51 sends none.
      const again = await Sandbox.connect(s.sandboxId, { timeoutMs: 4_000 })
      assert.equal(await again.isRunning(), true)
      await eventually(async () => assert.equal(await s.isRunning(), false), 'sandbox past its timeout')
      await assert.rejects(Sandbox.connect(s.sandboxId), (err) => /not found/i.test(err.message))
    })

    test('fork with count: each its own sandbox with the files', async () => {
      await sbx.files.write('/home/user/forked.txt', 'from parent')
      const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, timeoutMs: 60_000 })
      assert.equal(forks.length, 2)
      made.push(...forks)
      const ids = new Set(forks.map((f) => f.sandboxId))
      assert.equal(ids.size, 2)
      assert.ok(!ids.has(sbx.sandboxId))
      for (const f of forks) assert.equal(await f.files.read('/home/user/forked.txt'), 'from parent')
    })

    test('snapshots: create, list by sandbox, create from it, delete', async () => {
      await sbx.files.write('/home/user/snap.txt', 'in snapshot')
      const snap = await sbx.createSnapshot()
      assert.ok(snap.snapshotId, JSON.stringify(snap))
      const listed = []
      const pager = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId })
      while (pager.hasNext) listed.push(...(await pager.nextItems()))
      assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
      const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
      made.push(child)
      assert.equal(await child.files.read('/home/user/snap.txt'), 'in snapshot')
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    })

    test('refused options say why: iam tokens, egressProxy, httpsPorts', async () => {
      const refused = async (opts, word) => {
        let err
        try {
          made.push(await Sandbox.create(TEMPLATE, { ...opts, timeoutMs: 30_000 }))
        } catch (e) {
          err = e
        }
        assert.ok(err, `create with ${word} was accepted`)
        assert.match(err.message, new RegExp(word), err.message)
      }
      if (sdk.Secret?.iamToken) {
        await refused({ iam: { tokens: { aws: sdk.Secret.iamToken({ audience: 'sts.amazonaws.com' }) } } }, 'iam')
      }
      await refused({ network: { egressProxy: { address: 'proxy.example.com:1080' } } }, 'egressProxy')
      if (httpsPorts) await refused({ network: { httpsPorts: [49983] } }, 'https_ports')
    })

    test('network.httpsPorts: the proxy speaks TLS to a port whose service serves HTTPS', { skip: !httpsPorts }, async () => {
      const s = await Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 120_000, network: { httpsPorts: [8443] } })
      made.push(s)
      assert.deepEqual((await s.getInfo()).network?.httpsPorts, [8443])
      await s.commands.run('cd /tmp && openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -days 1 -subj /CN=self 2>/dev/null')
      const serve = (port) => `cd /tmp && python3 -c "
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'over tls')
srv = http.server.HTTPServer(('0.0.0.0', ${port}), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain('c.pem', 'k.pem')
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()"`
      await s.commands.run(serve(8443), { background: true })
      await s.commands.run(serve(8444), { background: true })
      const ask = (port) => fetch(process.env.E2B_SANDBOX_URL, { headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': String(port) } })
      await eventually(async () => {
        const res = await ask(8443)
        assert.equal(res.status, 200)
        assert.equal(await res.text(), 'over tls')
      }, 'the HTTPS port through the proxy')
      // A port not listed is plain HTTP, which the TLS service cannot answer.
      const plain = await ask(8444)
      assert.notEqual(plain.status, 200)
    })

    test('the E2B client class binds options', { skip: !client }, async () => {
      const e2b = new sdk.E2B({ apiKey: process.env.E2B_API_KEY })
      const s = await e2b.Sandbox.create(TEMPLATE, { metadata: { audit: tag }, timeoutMs: 60_000 })
      made.push(s)
      assert.equal((await s.commands.run('echo bound')).stdout, 'bound\n')
      assert.equal(await e2b.Template.exists(TEMPLATE), true)
    })
  })
}
