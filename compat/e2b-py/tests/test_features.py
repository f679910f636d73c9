"""What the E2B parity work added, as far as the installed SDK exposes it:
volumes (the Volume class and volume_mounts), network options at create
and update_network on a running sandbox against the e2e harness's fake
web, secrets with network.rules, and envd 0.6 file metadata."""

import os
import secrets as pysecrets
import time

import e2b
import pytest
from e2b import Sandbox

from helpers import OPTS, TEMPLATE, eventually, tag

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Volume content requests go to E2B_VOLUME_API_URL (https://api.<domain>
# when unset): a self-hosted user points it at space's E2B API.
os.environ.setdefault("E2B_VOLUME_API_URL", os.environ.get("E2B_API_URL", ""))

WEB = {
    "inspect": os.environ.get("SPACE_TEST_WEB_INSPECT"),
    "allowed": os.environ.get("SPACE_TEST_WEB_ALLOWED_NAME"),
    "denied": os.environ.get("SPACE_TEST_WEB_DENIED_NAME"),
    "other": os.environ.get("SPACE_TEST_WEB_OTHER_NAME"),
    "shared": os.environ.get("SPACE_TEST_WEB_SHARED_ADDR"),
    "other_addr": os.environ.get("SPACE_TEST_WEB_OTHER_ADDR"),
    "ca": os.environ.get("SPACE_TEST_WEB_CA"),
}
needs_web = pytest.mark.skipif(not WEB["inspect"], reason="needs the fake web of the e2e harness (SPACE_TEST_WEB_*)")


@pytest.fixture
def create():
    made = []

    def make(**kw):
        s = Sandbox.create(TEMPLATE, timeout=180, **kw, **OPTS)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.kill()
        except Exception:  # noqa: BLE001
            pass


def pin(sbx):
    """The fake web's names in /etc/hosts and its CA in /tmp/web-ca.pem."""
    sbx.files.write("/tmp/web-ca.pem", WEB["ca"])
    hosts = f"{WEB['shared']} {WEB['allowed']}\n{WEB['shared']} {WEB['denied']}\n{WEB['other_addr']} {WEB['other']}\n"
    sbx.files.write("/tmp/hosts.add", hosts)
    sbx.commands.run("cat /tmp/hosts.add >> /etc/hosts", user="root")


def curl(sbx, args):
    try:
        r = sbx.commands.run(f"curl -sS --fail-with-body -m 10 {args}")
        return True, r.stdout
    except e2b.CommandExitException as err:
        return False, err.stdout + err.stderr


def reaches(sbx, host, addr):
    ok, out = curl(sbx, f"http://{host}/")
    assert ok, f"{host} unreachable: {out}"
    assert out == f"host={host} sni= addr={addr}"


def refused(sbx, target):
    began = time.monotonic()
    ok, out = curl(sbx, target)
    assert not ok, f"{target} reached: {out}"
    assert time.monotonic() - began < 8, f"{target} was refused only after {time.monotonic() - began:.1f} s"


@needs_web
def test_network_allow_out_without_internet(create):
    sbx = create(allow_internet_access=False, network={"allow_out": [WEB["other"]]})
    pin(sbx)
    reaches(sbx, WEB["other"], WEB["other_addr"])
    refused(sbx, f"http://{WEB['allowed']}/")
    info = sbx.get_info()
    assert getattr(info, "allow_internet_access", False) is False


@needs_web
def test_network_deny_out(create):
    sbx = create(network={"deny_out": [WEB["other_addr"]]})
    pin(sbx)
    refused(sbx, f"http://{WEB['other']}/")
    reaches(sbx, WEB["allowed"], WEB["shared"])


@needs_web
@pytest.mark.skipif(not hasattr(Sandbox, "update_network"), reason="update_network is newer than this e2b")
def test_update_network(create):
    sbx = create()
    pin(sbx)
    reaches(sbx, WEB["other"], WEB["other_addr"])
    sbx.update_network({"deny_out": [WEB["other_addr"]]})
    refused(sbx, f"http://{WEB['other']}/")
    reaches(sbx, WEB["allowed"], WEB["shared"])
    sbx.update_network({"allow_out": [WEB["allowed"]], "deny_out": ["0.0.0.0/0"]})
    reaches(sbx, WEB["allowed"], WEB["shared"])
    refused(sbx, f"http://{WEB['denied']}/")
    sbx.update_network({})
    reaches(sbx, WEB["other"], WEB["other_addr"])


@needs_web
@pytest.mark.skipif(not hasattr(e2b, "Secret"), reason="secrets are newer than this e2b")
def test_secrets_and_rules(create):
    import httpx

    Secret = e2b.Secret
    name = tag("py-secret").replace("-", "_")
    value = f"py-secret-{pysecrets.token_hex(16)}"
    info = Secret.create(name, value, **OPTS)
    sbx = None
    try:
        assert info.name == name
        assert Secret.get_info(name, **OPTS).name == name
        assert Secret.exists(name, **OPTS) is True
        assert Secret.exists(name + "_missing", **OPTS) is False
        assert value not in repr(info)
        sbx = create(network={"rules": {WEB["allowed"]: [{"transform": {"headers": {"Authorization": f"Bearer {Secret.fill(name)}"}}}]}})
        pin(sbx)
        ok, out = curl(sbx, f"https://{WEB['allowed']}/{name}")
        assert ok, out
        up = httpx.get(WEB["inspect"], params={"host": WEB["allowed"], "uri": f"/{name}"}).json()
        assert up["uri"] == f"/{name}"
        assert up["headers"]["Authorization"] == [f"Bearer {value}"]
        env = sbx.commands.run("cat /proc/self/environ | tr '\\0' '\\n'").stdout
        assert value not in env
        # A secret in use by a sandbox's rules is not destroyed under it.
        with pytest.raises(e2b.SecretException):
            Secret.destroy(name, **OPTS)
    finally:
        if sbx is not None:
            sbx.kill()
        assert Secret.destroy(name, **OPTS) is True
    assert Secret.destroy(name, **OPTS) is False


def test_volumes(create):
    Volume = e2b.Volume
    name = tag("py-vol").lower()[:48]
    vol = Volume.create(name, **OPTS)
    try:
        assert vol.volume_id and vol.name == name
        vol.write_file("/docs/readme.txt", "hello volume")
        assert vol.read_file("/docs/readme.txt") == "hello volume"
        assert vol.exists("/docs/readme.txt") is True
        assert vol.exists("/docs/missing") is False
        again = Volume.connect(vol.volume_id, **OPTS)
        assert again.name == name

        sbx = create(volume_mounts={"/mnt/data": vol})
        assert sbx.files.read("/mnt/data/docs/readme.txt") == "hello volume"
        sbx.files.write("/mnt/data/from-sandbox.txt", "written inside")
        assert vol.read_file("/from-sandbox.txt") == "written inside"
        vol.remove("/from-sandbox.txt")
        assert vol.exists("/from-sandbox.txt") is False
        sbx.kill()
    finally:
        assert Volume.destroy(vol.volume_id, **OPTS) is True
    assert Volume.destroy(vol.volume_id, **OPTS) is False


@pytest.mark.skipif("metadata" not in getattr(e2b.EntryInfo, "__dataclass_fields__", {}), reason="file metadata (envd 0.6) is newer than this e2b")
def test_file_metadata(create):
    sbx = create()
    sbx.files.make_dir("/home/user/mw")
    handle = sbx.files.watch_dir("/home/user/mw", include_entry=True)
    try:
        sbx.files.write("/home/user/mw/w.txt", "watched", metadata={"seen": "yes"})
        got = []

        def entry_seen():
            got.extend(handle.get_new_events())
            entries = [e.entry for e in got if e.name == "w.txt" and e.entry is not None]
            assert entries and entries[-1].path == "/home/user/mw/w.txt", got
            assert entries[-1].metadata == {"seen": "yes"}, entries[-1]

        eventually(entry_seen, "watch event with its entry")
    finally:
        handle.stop()

    written = sbx.files.write("/home/user/meta.txt", "m", metadata={"owner": "py", "kind": "note"})
    assert written.metadata == {"owner": "py", "kind": "note"}
    assert sbx.files.get_info("/home/user/meta.txt").metadata == {"owner": "py", "kind": "note"}
    listed = [e for e in sbx.files.list("/home/user") if e.name == "meta.txt"]
    assert listed[0].metadata == {"owner": "py", "kind": "note"}
    sbx.files.rename("/home/user/meta.txt", "/home/user/meta2.txt")
    assert sbx.files.get_info("/home/user/meta2.txt").metadata == {"owner": "py", "kind": "note"}
    sbx.files.write("/home/user/meta2.txt", "overwritten")
    assert not sbx.files.get_info("/home/user/meta2.txt").metadata


def test_mcp_without_a_gateway_is_refused_clearly():
    # The full gateway needs a template whose recipe declares one (the JS
    # suite builds it: compat/e2b-js/lib/life-mcp.yaml); here, the refusals.
    with pytest.raises(Exception) as err:
        Sandbox.create(TEMPLATE, mcp={"exa": {"apiKey": "k"}}, **OPTS)
    assert "provides no MCP gateway" in str(err.value), err.value
    with pytest.raises(Exception) as err:
        Sandbox.create(mcp={"exa": {"apiKey": "k"}}, **OPTS)
    assert "no built-in mcp-gateway template" in str(err.value), err.value


@pytest.mark.skipif("mode" not in __import__("inspect").signature(Sandbox.pause).parameters, reason="pause(mode=...) is newer than this e2b")
def test_pause_without_memory_sync(create):
    sbx = create()
    sbx.files.write("/home/user/disk.txt", "on disk")
    boot = sbx.commands.run("cat /proc/sys/kernel/random/boot_id").stdout
    assert sbx.pause(mode="filesystem") is True
    assert sbx.pause(mode="filesystem") is False  # already paused
    again = Sandbox.connect(sbx.sandbox_id, **OPTS)
    assert again.files.read("/home/user/disk.txt") == "on disk"
    assert again.commands.run("cat /proc/sys/kernel/random/boot_id").stdout != boot


@pytest.mark.skipif(not os.environ.get("E2B_SANDBOX_URL"), reason="asks the proxy by headers (E2B_SANDBOX_URL)")
def test_mask_request_host_and_private_traffic(create):
    import httpx

    sbx = create(network={"mask_request_host": "localhost:${PORT}", "allow_public_traffic": False})
    server = "\n".join([
        "import http.server as h",
        "class H(h.BaseHTTPRequestHandler):",
        "    def do_GET(s):",
        '        b = ("host=%s" % s.headers.get("Host")).encode()',
        '        s.send_response(200); s.send_header("Content-Length", str(len(b))); s.end_headers(); s.wfile.write(b)',
        'h.HTTPServer(("0.0.0.0", 8000), H).serve_forever()',
    ])
    sbx.files.write("/tmp/host.py", server)
    sbx.commands.run("python3 /tmp/host.py", background=True)
    assert sbx.traffic_access_token, "allow_public_traffic false gives a traffic token"

    def ask(headers):
        return httpx.get(os.environ["E2B_SANDBOX_URL"], headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000", **headers})

    deadline = time.monotonic() + 20
    while True:
        res = ask({"E2b-Traffic-Access-Token": sbx.traffic_access_token})
        if res.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert res.status_code == 200, res.text
    assert res.text == "host=localhost:8000"
    assert ask({}).status_code == 403
