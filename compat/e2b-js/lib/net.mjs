// Network rules, network updates, maskRequestHost and secrets through one
// unmodified E2B JS SDK, against sandboxes on the e2e harness's fake web
// (never the real internet). The harness passes the fake web in
// SPACE_TEST_WEB_* (test/e2e/e2b_net_test.go, netJSEnv); without it the
// suite skips.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { TEMPLATE } from './suite.mjs'

const web = {
  inspect: process.env.SPACE_TEST_WEB_INSPECT,
  allowed: process.env.SPACE_TEST_WEB_ALLOWED_NAME,
  denied: process.env.SPACE_TEST_WEB_DENIED_NAME,
  other: process.env.SPACE_TEST_WEB_OTHER_NAME,
  sharedAddr: process.env.SPACE_TEST_WEB_SHARED_ADDR,
  otherAddr: process.env.SPACE_TEST_WEB_OTHER_ADDR,
  ca: process.env.SPACE_TEST_WEB_CA,
}
const skip = web.inspect ? false : 'needs the fake web of the e2e harness (SPACE_TEST_WEB_*)'

// body is what the fake web's servers answer (nettest.WebBody).
const body = (host, sni, addr) => `host=${host} sni=${sni} addr=${addr}`

// upstream is what the fake web last received for host.
// upstream is the last request the fake web got for host with target
// uri: the suites run side by side, and ask for the same host.
async function upstream(host, uri) {
  const res = await fetch(`${web.inspect}?host=${encodeURIComponent(host)}&uri=${encodeURIComponent(uri)}`)
  assert.equal(res.status, 200, `the fake web got nothing for ${host}${uri}`)
  return res.json()
}

// pin writes the fake web's names into /etc/hosts and its CA into
// /tmp/web-ca.pem: the gateway judges names itself.
async function pin(sbx) {
  await sbx.files.write('/tmp/web-ca.pem', web.ca)
  const hosts = [`${web.sharedAddr} ${web.allowed}`, `${web.sharedAddr} ${web.denied}`, `${web.otherAddr} ${web.other}`]
  await sbx.commands.run(`printf '%s\\n' ${hosts.map((h) => `'${h}'`).join(' ')} >> /etc/hosts`, { user: 'root' })
}

// curl runs curl in the sandbox; it resolves to { ok, out }.
async function curl(sbx, args) {
  const r = await sbx.commands.run(`curl -sS --fail-with-body -m 10 ${args}`).catch((err) => err)
  return { ok: r.exitCode === 0, out: `${r.stdout ?? ''}${r.stderr ?? ''}` }
}

async function reaches(sbx, host, addr) {
  const r = await curl(sbx, `http://${host}/`)
  assert.ok(r.ok, `${host} unreachable: ${r.out}`)
  assert.equal(r.out, body(host, '', addr))
}

async function refused(sbx, target) {
  const began = Date.now()
  const r = await curl(sbx, target)
  assert.ok(!r.ok, `${target} reached: ${r.out}`)
  assert.ok(Date.now() - began < 8000, `${target} was refused only after ${Date.now() - began} ms`)
}

export function defineNetSuite(label, sdk) {
  const { Sandbox, Secret, SecretNotFoundError, ALL_TRAFFIC } = sdk

  describe(`${label} network`, { concurrency: 1, skip }, () => {
    const secretName = `net-${label.replace(/[^a-z0-9]/gi, '')}-${process.pid}-${Date.now()}`
    const value = `js-secret-${randomBytes(16).toString('hex')}`
    const sandboxes = []
    const create = async (opts) => {
      const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 240_000, ...opts })
      sandboxes.push(sbx)
      return sbx
    }
    after(async () => {
      for (const sbx of sandboxes) await sbx.kill().catch(() => {})
      await Secret.destroy(secretName).catch(() => {})
    })

    test('secrets: create, getInfo, list, update, exists, destroy', async () => {
      const info = await Secret.create(secretName, value, { metadata: { suite: label } })
      assert.equal(info.name, secretName)
      assert.match(info.secretId, /^sec_/)
      assert.equal(info.version, 1)
      assert.deepEqual(info.metadata, { suite: label })
      assert.ok(!JSON.stringify(info).includes(value))
      assert.equal((await Secret.getInfo(info.secretId)).name, secretName)
      assert.equal((await Secret.getInfo(secretName)).secretId, info.secretId)
      const pages = Secret.list({ limit: 1 })
      const seen = []
      while (pages.hasNext) seen.push(...(await pages.nextItems()))
      assert.ok(seen.some((s) => s.secretId === info.secretId), 'list misses the secret')
      assert.ok(await Secret.exists(secretName))
      assert.equal(await Secret.exists(`${secretName}-missing`), false)
      await assert.rejects(Secret.getInfo(`${secretName}-missing`), SecretNotFoundError)
      const scratch = `${secretName}-scratch`
      await Secret.create(scratch, 'v1')
      assert.equal((await Secret.update(scratch, 'v2')).version, 2)
      assert.equal(await Secret.destroy(scratch), true)
      assert.equal(await Secret.destroy(scratch), false)
    })

    test('network.rules: the header reaches the upstream, the secret never enters the sandbox', async () => {
      const sbx = await create({
        network: {
          rules: {
            [web.allowed]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(secretName)}`, 'X-Suite': label } } }],
          },
        },
      })
      await pin(sbx)
      const r = await curl(sbx, `https://${web.allowed}/${secretName}`)
      assert.ok(r.ok, r.out)
      assert.equal(r.out, body(web.allowed, web.allowed, web.sharedAddr))
      const up = await upstream(web.allowed, `/${secretName}`)
      assert.equal(up.uri, `/${secretName}`)
      assert.equal(up.tls, true)
      assert.deepEqual(up.headers.Authorization, [`Bearer ${value}`])
      assert.deepEqual(up.headers['X-Suite'], [label])
      // Not in what the sandbox sends, its environment or its files.
      const verbose = await curl(sbx, `-v https://${web.allowed}/ 2>&1`)
      assert.ok(!verbose.out.includes(value), 'curl -v shows the secret')
      const grep = await sbx.commands.run(`grep -rlsF -e '${value.slice(0, 20)}' /proc/[0-9]*/environ /etc /home /tmp /root /var 2>/dev/null; true`, { user: 'root' })
      assert.equal(grep.stdout, '', `the secret is in ${grep.stdout}`)
      const info = await sbx.getInfo()
      assert.ok(!JSON.stringify(info).includes(value), 'getInfo shows the secret')
      assert.equal(info.network.rules[web.allowed][0].transform.headers.Authorization, `Bearer ${Secret.fill(secretName)}`)

      // Replaced and then cleared on the running sandbox.
      await sbx.updateNetwork({ rules: { [web.allowed]: [{ transform: { headers: { 'X-Replaced': 'yes' } } }] } })
      assert.ok((await curl(sbx, `https://${web.allowed}/replaced`)).ok)
      const replaced = await upstream(web.allowed, '/replaced')
      assert.deepEqual(replaced.headers['X-Replaced'], ['yes'])
      assert.equal(replaced.headers.Authorization, undefined)
      await sbx.updateNetwork({})
      const direct = await curl(sbx, `--cacert /tmp/web-ca.pem https://${web.allowed}/cleared`)
      assert.ok(direct.ok, direct.out)
      const cleared = await upstream(web.allowed, '/cleared')
      assert.equal(cleared.uri, '/cleared')
      assert.equal(cleared.headers['X-Replaced'], undefined)
      assert.equal((await sbx.getInfo()).network.rules, undefined)
    })

    test('updateNetwork: deny, allow only a domain, clear', async () => {
      const sbx = await create({})
      await pin(sbx)
      await reaches(sbx, web.other, web.otherAddr)

      await sbx.updateNetwork({ denyOut: [web.otherAddr] })
      await refused(sbx, `http://${web.other}/`)
      await reaches(sbx, web.allowed, web.sharedAddr)
      assert.deepEqual((await sbx.getInfo()).network.denyOut, [`${web.otherAddr}/32`])

      // The SDK's selector callbacks: deny everything but allowed.test.
      await sbx.updateNetwork({ allowOut: [web.allowed], denyOut: ({ allTraffic }) => [allTraffic] })
      assert.equal(ALL_TRAFFIC, '0.0.0.0/0')
      await reaches(sbx, web.allowed, web.sharedAddr)
      await refused(sbx, `http://${web.other}/`)
      await refused(sbx, `http://${web.denied}/`)
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, false)
      assert.deepEqual(info.network.allowOut, [web.allowed])

      await sbx.updateNetwork({ allowInternetAccess: false })
      await refused(sbx, `http://${web.allowed}/`)

      await sbx.updateNetwork({})
      await reaches(sbx, web.other, web.otherAddr)
      await reaches(sbx, web.denied, web.sharedAddr)
      assert.equal((await sbx.getInfo()).allowInternetAccess, true)

      await assert.rejects(sbx.updateNetwork({ egressProxy: { address: 'proxy.example.com:1080' } }), /egressProxy/)
    })

    test('allowOut at create with allowInternetAccess false', async () => {
      const sbx = await create({ allowInternetAccess: false, network: { allowOut: [web.other] } })
      await pin(sbx)
      await reaches(sbx, web.other, web.otherAddr)
      await refused(sbx, `http://${web.allowed}/`)
    })

    test('maskRequestHost and allowPublicTraffic: false', async () => {
      const sbx = await create({ network: { maskRequestHost: 'localhost:${PORT}', allowPublicTraffic: false } })
      const server = [
        'import http.server as h',
        'class H(h.BaseHTTPRequestHandler):',
        '    def do_GET(s):',
        '        b = ("host=%s" % s.headers.get("Host")).encode()',
        '        s.send_response(200); s.send_header("Content-Length", str(len(b))); s.end_headers(); s.wfile.write(b)',
        'h.HTTPServer(("0.0.0.0", 8000), H).serve_forever()',
      ].join('\n')
      await sbx.files.write('/tmp/host.py', server)
      await sbx.commands.run('python3 /tmp/host.py', { background: true })
      const info = await sbx.getInfo()
      assert.equal(info.network.maskRequestHost, 'localhost:${PORT}')
      assert.equal(info.network.allowPublicTraffic, false)
      const ask = (headers) => fetch(process.env.E2B_SANDBOX_URL, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000', ...headers } })
      const deadline = Date.now() + 20_000
      let res
      for (;;) {
        res = await ask({ 'E2b-Traffic-Access-Token': sbx.trafficAccessToken })
        if (res.status === 200 || Date.now() > deadline) break
        await new Promise((r) => setTimeout(r, 200))
      }
      assert.equal(res.status, 200)
      assert.equal(await res.text(), 'host=localhost:8000')
      assert.equal((await ask({})).status, 403)
    })
  })
}
