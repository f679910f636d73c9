"""space-sandbox against a live server: SPACE_URL, SPACE_API_KEY (an admin
key) and SPACE_TEMPLATE (default minimal). Without SPACE_URL these tests
skip, unless SPACE_SDK_LIVE=1 (test/e2e sets it), which makes that a failure.
test/e2e/sdk_native_test.go runs them against the in-process server."""

import asyncio
import os
import time
import uuid

import pytest

from space_sandbox import APIError, AsyncClient, Client, ConflictError, NotFoundError, __version__

URL = os.environ.get("SPACE_URL")
TEMPLATE = os.environ.get("SPACE_TEMPLATE", "minimal")

if not URL:
    if os.environ.get("SPACE_SDK_LIVE") == "1":
        raise RuntimeError("SPACE_SDK_LIVE=1 but SPACE_URL is not set")
    pytest.skip("no SPACE_URL: live tests need a server", allow_module_level=True)


def uniq(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client():
    with Client(URL, os.environ.get("SPACE_API_KEY")) as c:
        yield c


@pytest.fixture
def sandbox(client):
    made = []

    def make(**options):
        sb = client.create_sandbox(TEMPLATE, wait=True, **options)
        made.append(sb["id"])
        return sb
    yield make
    for sid in made:
        try:
            client.delete_sandbox(sid)
        except NotFoundError:
            pass


def test_sandbox_crud_exec_and_files(client, sandbox):
    tag = uniq("py")
    sb = sandbox(env={"SDK_GREETING": "hi from env"}, metadata={"sdk": tag}, vcpus=1, memory_mb=256,
                 timeout_s=600, network={"allow_internet": False, "deny": ["203.0.113.9"]})
    assert sb["state"] == "running"
    assert client.get_sandbox(sb["id"])["metadata"]["sdk"] == tag
    assert [s["id"] for s in client.list_sandboxes(metadata={"sdk": tag})] == [sb["id"]]
    assert client.list_sandboxes(metadata={"sdk": tag + "-none"}) == []
    assert "expires_at" in client.set_timeout(sb["id"], 900)

    res = client.exec(sb["id"], ["sh", "-c", 'echo "$SDK_GREETING"; echo oops >&2; exit 4'])
    assert (res["stdout"], res["stderr"], res["exit_code"]) == ("hi from env\n", "oops\n", 4)

    entry = client.write_file(sb["id"], "/tmp/sdk/a.txt", b"\x00binary\xff")
    assert entry["size"] == 8
    assert client.read_file(sb["id"], "/tmp/sdk/a.txt") == b"\x00binary\xff"
    client.mkdir(sb["id"], "/tmp/sdk/sub")
    client.move(sb["id"], "/tmp/sdk/a.txt", "/tmp/sdk/sub/b.txt")
    names = [e["path"] for e in client.list_dir(sb["id"], "/tmp/sdk", depth=2)["entries"]]
    assert names == ["/tmp/sdk/sub", "/tmp/sdk/sub/b.txt"], names
    client.remove_file(sb["id"], "/tmp/sdk/sub/b.txt")
    with pytest.raises(NotFoundError) as e:
        client.read_file(sb["id"], "/tmp/sdk/sub/b.txt")
    assert e.value.code == 404 and e.value.message

    assert client.pause(sb["id"])["state"] == "paused"
    assert client.resume(sb["id"])["state"] == "running"
    assert client.suspend(sb["id"])["state"] == "suspended"
    assert client.resume(sb["id"])["state"] == "running"
    kinds = [ev.get("type") for ev in client.events(sb["id"])]
    assert kinds, "no lifecycle events"
    assert "metrics" in client.sandbox_metrics(sb["id"])

    client.delete_sandbox(sb["id"])
    with pytest.raises(NotFoundError):
        client.get_sandbox(sb["id"])


def test_session_outlives_its_client_and_reattaches_by_offset(sandbox):
    sb = sandbox()
    with Client(URL, os.environ.get("SPACE_API_KEY")) as first:
        s = first.create_session(sb["id"], ["cat"], stdin=True, tag="sdk-cat")
        first.write_stdin(sb["id"], s["id"], "one\n")
        seen, offset = b"", 0
        for ev in first.attach(sb["id"], s["id"]):
            seen += ev.data
            offset = ev.offset
            if seen == b"one\n":
                break
        assert seen == b"one\n" and offset == 4
    # A new client (another process, in real life) finds the session and
    # continues exactly where the first one stopped reading.
    with Client(URL, os.environ.get("SPACE_API_KEY")) as second:
        assert s["id"] in [x["id"] for x in second.list_sessions(sb["id"])]
        second.write_stdin(sb["id"], s["id"], "two\n", close=True)
        events = list(second.attach(sb["id"], s["id"], offset=offset))
        assert b"".join(e.data for e in events if e.type == "stdout") == b"two\n"
        assert events[-1].type == "exit" and events[-1].exit_code == 0
        assert second.get_session(sb["id"], s["id"])["state"] != "running"
        # From the start, everything the server still holds.
        assert b"".join(e.data for e in second.attach(sb["id"], s["id"])) == b"one\ntwo\n"


def test_signal_and_tty_resize(client, sandbox):
    sb = sandbox()
    s = client.create_session(sb["id"], ["sh", "-c", "stty size; sleep 60"], tty=True, cols=80, rows=24)
    client.resize(sb["id"], s["id"], 100, 40)
    client.signal(sb["id"], s["id"], "SIGKILL")
    events = list(client.attach(sb["id"], s["id"]))
    assert events[-1].type == "exit"
    assert events[-1].exit_code != 0 or events[-1].error


def test_snapshot_restore_and_branch(client, sandbox):
    sb = sandbox()
    # On the root volume (/tmp may be a tmpfs, which a snapshot's files lack).
    home = client.exec(sb["id"], ["sh", "-c", 'echo "$HOME"'])["stdout"].strip()
    state = home.rstrip("/") + "/state"
    client.write_file(sb["id"], state, "before")
    snap = client.create_snapshot(sb["id"], "sdk-snap")
    assert snap["name"] == "sdk-snap"
    client.write_file(sb["id"], state, "after")
    assert client.read_file(sb["id"], state, snapshot="sdk-snap") == b"before"
    assert client.restore(sb["id"], "sdk-snap")["state"] == "running"
    assert client.read_file(sb["id"], state) == b"before"
    assert [x["name"] for x in client.list_snapshots(sb["id"])] == ["sdk-snap"]

    branches = client.branch(sb["id"], 1)
    assert len(branches) == 1
    try:
        br = client.wait_sandbox(branches[0]["id"], "running", timeout_s=120)
        assert br["id"] != sb["id"]
        assert client.read_file(br["id"], state) == b"before"
    finally:
        client.delete_sandbox(branches[0]["id"])
    client.delete_snapshot(sb["id"], "sdk-snap")
    assert client.list_snapshots(sb["id"]) == []


def test_network_policy(client, sandbox):
    sb = sandbox(network="none")
    got = client.set_network(sb["id"], {"allow_internet": False, "allow": ["198.51.100.0/24"], "deny": ["198.51.100.7"]})
    assert got["network"]["allow"] == ["198.51.100.0/24"] and got["network"]["deny"] == ["198.51.100.7/32"]
    with pytest.raises(APIError) as e:
        client.set_network(sb["id"], {"allow": ["2001:db8::/32"]})
    assert e.value.code == 400 and e.value.message


def test_volumes_mounted_into_a_sandbox(client, sandbox):
    vol = client.create_volume(uniq("pyvol"), size_mb=64)
    try:
        client.mkdir_volume(vol["id"], "/data")
        client.write_volume_file(vol["id"], "/data/hello", "from the api")
        assert client.read_volume_file(vol["id"], "/data/hello") == b"from the api"
        assert [e["name"] for e in client.list_volume_dir(vol["id"], "/data")["entries"]] == ["hello"]
        assert vol["id"] in [v["id"] for v in client.list_volumes()]
        sb = sandbox(volume_mounts=[{"volume": vol["name"], "path": "/mnt/vol"}])
        assert client.read_file(sb["id"], "/mnt/vol/data/hello") == b"from the api"
        with pytest.raises(ConflictError):
            client.delete_volume(vol["id"])
        client.delete_sandbox(sb["id"])
        client.remove_volume_file(vol["id"], "/data/hello")
        assert client.get_volume(vol["id"])["name"] == vol["name"]
    finally:
        try:
            client.delete_volume(vol["id"])
        except NotFoundError:
            pass
    with pytest.raises(NotFoundError):
        client.get_volume(vol["id"])


def test_templates_pools_and_build_log(client):
    names = [t["name"] for t in client.list_templates()]
    assert TEMPLATE in names
    t = client.get_template(TEMPLATE)
    assert t["name"] == TEMPLATE
    events = list(client.template_logs(TEMPLATE))
    assert events[-1].done and events[-1].template["name"] == TEMPLATE
    lines = [e for e in events if not e.done]
    assert [e.index for e in lines] == list(range(len(lines)))
    # Resuming from a line sends only the rest.
    if len(lines) > 1:
        assert [e.index for e in client.template_logs(TEMPLATE, start=1) if not e.done] == list(range(1, len(lines)))
    assert client.set_pool(TEMPLATE, 0)["name"] == TEMPLATE
    with pytest.raises(APIError) as e:
        client.create_template("name: [unclosed", name=uniq("bad"))
    assert e.value.code == 400
    with pytest.raises(NotFoundError):
        client.get_template(uniq("missing"))


def test_secrets_keys_projects_and_tenancy(client, sandbox):
    sb = sandbox()
    name = "SDK_PY_" + uuid.uuid4().hex[:6].upper()
    assert client.set_secret(name, "s3cret")["name"] == name
    assert name in [s["name"] for s in client.list_secrets()]
    assert "value" not in client.list_secrets()[0]
    client.delete_secret(name)
    with pytest.raises(NotFoundError):
        client.delete_secret(name)

    project = uniq("sdkpy")
    key = client.create_key(uniq("k"), project=project)
    assert key["key"] and key["project"] == project
    try:
        with Client(URL, key["key"]) as other:
            assert other.list_sandboxes() == []
            with pytest.raises(NotFoundError):
                other.get_sandbox(sb["id"])  # another project's id looks missing
            with pytest.raises(APIError) as e:
                other.list_keys()
            assert e.value.code in (401, 403)
        assert project in [p["name"] for p in client.list_projects()]
        got = client.set_project(project, max_sandboxes=3)
        assert client.get_project(project)["name"] == project == got["name"]
    finally:
        client.revoke_key(key["id"])
    assert key["id"] not in [k["id"] for k in client.list_keys()]


def test_nodes(client):
    nodes = client.list_nodes()
    assert nodes, "no nodes"
    node = client.get_node(nodes[0]["id"])
    assert node["id"] == nodes[0]["id"]
    if node["id"] == "local":
        # space serve: one node in its own process; cordon and drain need a cluster.
        for call in (client.cordon_node, client.uncordon_node, client.drain_node, client.remove_node):
            with pytest.raises(ConflictError) as e:
                call(node["id"])
            assert "needs a cluster" in e.value.message
    else:
        assert client.cordon_node(node["id"])["state"] == "cordoned"
        assert client.uncordon_node(node["id"])["state"] != "cordoned"
    with pytest.raises(NotFoundError):
        client.remove_node(uniq("no-such-node"))
    # The SDK is versioned with the server (internal/version).
    assert client.health() == {"status": "ok", "version": __version__}


def test_async_client():
    async def run():
        async with AsyncClient(URL, os.environ.get("SPACE_API_KEY")) as c:
            sb = await c.create_sandbox(TEMPLATE, wait=True, metadata={"sdk": "async"})
            try:
                res = await c.exec(sb["id"], ["echo", "async"])
                assert res["stdout"] == "async\n"
                s = await c.create_session(sb["id"], ["sh", "-c", "echo a; echo b >&2; exit 2"])
                events = [e async for e in c.attach(sb["id"], s["id"])]
                kinds = {e.type: e for e in events}
                assert kinds["stdout"].data == b"a\n" and kinds["stderr"].data == b"b\n"
                assert events[-1].exit_code == 2
                await c.write_file(sb["id"], "/tmp/x", "y")
                assert await c.read_file(sb["id"], "/tmp/x") == b"y"
                with pytest.raises(NotFoundError):
                    await c.get_session(sb["id"], "nope")
            finally:
                await c.delete_sandbox(sb["id"])
    asyncio.run(run())


class CuttingProxy:
    """A TCP proxy to the server that cuts every connection after `limit`
    bytes of answer: an attach through it keeps losing its connection."""

    def __init__(self, target, limit):
        import socket
        import threading
        from urllib.parse import urlsplit
        u = urlsplit(target)
        self.target = (u.hostname, u.port)
        self.limit = limit
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import socket
        import threading
        while not self._stop:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            up = socket.create_connection(self.target)

            def pump(src, dst, limit):
                sent = 0
                try:
                    while limit is None or sent < limit:
                        data = src.recv(min(4096, limit - sent) if limit else 4096)
                        if not data:
                            break
                        dst.sendall(data)
                        sent += len(data)
                except OSError:
                    pass
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            threading.Thread(target=pump, args=(down, up, None), daemon=True).start()
            threading.Thread(target=pump, args=(up, down, self.limit), daemon=True).start()

    def close(self):
        self._stop = True
        self.sock.close()


def test_attach_survives_connections_cut_by_the_network(client, sandbox):
    sb = sandbox()
    script = "for i in $(seq 1 40); do echo line-$i; sleep 0.02; done"
    s = client.create_session(sb["id"], ["sh", "-c", script])
    proxy = CuttingProxy(URL, limit=600)
    try:
        with Client(proxy.url, os.environ.get("SPACE_API_KEY")) as flaky:
            events = list(flaky.attach(sb["id"], s["id"]))
    finally:
        proxy.close()
    out = b"".join(e.data for e in events if e.type == "stdout").decode()
    assert out == "".join(f"line-{i}\n" for i in range(1, 41))
    assert events[-1].type == "exit" and events[-1].exit_code == 0
    assert proxy.connections > 2, "the proxy never cut the stream: the test proves nothing"
    offsets = [e.offset for e in events if e.type == "stdout"]
    assert offsets == sorted(set(offsets))


def test_network_denials_are_reported(client, sandbox):
    denied = os.environ.get("SPACE_TEST_WEB_DENIED_NAME")
    if not denied:
        pytest.skip("SPACE_TEST_WEB_DENIED_NAME: the fake web of test/e2e")
    sb = sandbox(network={"deny": [denied]})
    # busybox's nslookup asks the sandbox's gateway, which refuses the name.
    out = client.exec(sb["id"], ["nslookup", denied])
    assert out["exit_code"] != 0, out
    deadline = time.time() + 10
    while not client.network_denials(sb["id"]) and time.time() < deadline:
        time.sleep(0.2)
    denials = client.network_denials(sb["id"])
    assert denials and denied in denials[0].get("message", ""), (out, client.events(sb["id"]))
