"""The async client (e2b.AsyncSandbox): the same ground as the sync
suite, plus listing pages, metrics ranges, a sandbox timeout running out
and pause without memory."""

import asyncio
import datetime
import inspect

import pytest
import pytest_asyncio
from e2b import AsyncSandbox, CommandExitException, SandboxQuery, SandboxState
from e2b.sandbox.commands.command_handle import PtySize

from helpers import OPTS, TEMPLATE, eventually_async, tag

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

LABEL = tag("py-async")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sbx():
    s = await AsyncSandbox.create(TEMPLATE, timeout=300, metadata={"suite": LABEL, "n": "1"}, envs={"SUITE_GREETING": "hello"}, **OPTS)
    yield s
    try:
        await s.kill()
    except Exception:  # noqa: BLE001
        pass


async def test_create_and_commands(sbx):
    r = await sbx.commands.run("echo $SUITE_GREETING; whoami")
    assert r.stdout == "hello\nuser\n"
    info = await sbx.get_info()
    assert info.metadata["n"] == "1"
    assert await sbx.is_running()

    with pytest.raises(CommandExitException) as failed:
        await sbx.commands.run("exit 3")
    assert failed.value.exit_code == 3

    chunks = []
    bg = await sbx.commands.run("echo a; sleep 0.2; echo b", background=True, on_stdout=chunks.append)
    assert (await bg.wait()).stdout == "a\nb\n"
    assert "".join(chunks) == "a\nb\n"

    out = []
    cat = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=out.append)
    await sbx.commands.send_stdin(cat.pid, "async stdin\n")

    async def echoed():
        assert "".join(out) == "async stdin\n", out

    await eventually_async(echoed, "stdin echoed")
    assert any(p.pid == cat.pid for p in await sbx.commands.list())
    assert await sbx.commands.kill(cat.pid) is True
    assert await sbx.commands.kill(cat.pid) is False


async def test_files_and_watch(sbx):
    await sbx.files.write("/home/user/a/b.txt", "async file")
    assert await sbx.files.read("/home/user/a/b.txt") == "async file"
    assert [e.name for e in await sbx.files.list("/home/user/a")] == ["b.txt"]
    await sbx.files.rename("/home/user/a/b.txt", "/home/user/a/c.txt")
    assert await sbx.files.exists("/home/user/a/c.txt")
    assert not await sbx.files.exists("/home/user/a/b.txt")

    events = []
    handle = await sbx.files.watch_dir("/home/user/a", on_event=events.append)
    try:
        await sbx.files.write("/home/user/a/new.txt", "x")
        await sbx.files.remove("/home/user/a/c.txt")

        async def seen():
            names = {(e.name, e.type.value) for e in events}
            assert ("new.txt", "create") in names or ("new.txt", "write") in names, events
            assert ("c.txt", "remove") in names, events

        await eventually_async(seen, "watch events")
    finally:
        await handle.stop()


async def test_pty(sbx):
    out = bytearray()
    pty = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=out.extend)
    await sbx.pty.resize(pty.pid, PtySize(rows=33, cols=111))
    await sbx.pty.send_stdin(pty.pid, b"echo pty-$((6*7)); stty size; exit\n")
    await pty.wait()
    text = out.decode(errors="replace")
    assert "pty-42" in text and "33 111" in text, text


async def test_list_paging_and_metrics_range(sbx):
    other = await AsyncSandbox.create(TEMPLATE, timeout=120, metadata={"suite": LABEL, "n": "2"}, **OPTS)
    try:
        seen = []
        page = AsyncSandbox.list(query=SandboxQuery(metadata={"suite": LABEL}), limit=1, **OPTS)
        first = await page.next_items()
        assert len(first) == 1 and page.has_next
        seen += first
        second = await page.next_items()
        assert len(second) == 1
        seen += second
        if page.has_next:
            assert await page.next_items() == []
        assert sorted(s.sandbox_id for s in seen) == sorted([sbx.sandbox_id, other.sandbox_id])
        one = await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": LABEL, "n": "2"}), **OPTS).next_items()
        assert [s.sandbox_id for s in one] == [other.sandbox_id]
        assert one[0].metadata == {"suite": LABEL, "n": "2"}
    finally:
        await other.kill()

    async def some():
        m = await sbx.get_metrics()
        assert m, m
        return m

    metrics = await eventually_async(some, "metrics", timeout=15)
    assert metrics[-1].mem_used > 0 and metrics[-1].disk_total > 0
    now = datetime.datetime.now(datetime.timezone.utc)
    ranged = await sbx.get_metrics(start=now - datetime.timedelta(minutes=5), end=now + datetime.timedelta(seconds=5))
    assert ranged, "a range covering the sandbox's life has points"
    for m in ranged:
        assert now - datetime.timedelta(minutes=5, seconds=6) <= m.timestamp <= now + datetime.timedelta(seconds=6), m
    empty = await sbx.get_metrics(start=now - datetime.timedelta(hours=3), end=now - datetime.timedelta(hours=2))
    assert empty == []


async def test_sandbox_timeout_runs_out():
    short = await AsyncSandbox.create(TEMPLATE, timeout=5, **OPTS)
    assert await short.is_running()

    async def gone():
        assert not await short.is_running()

    await eventually_async(gone, "sandbox past its timeout", timeout=40)


async def test_pause_connect(sbx):
    await sbx.files.write("/home/user/kept.txt", "kept")
    sleeper = await sbx.commands.run("echo $$ > /home/user/shell.pid; sleep 600", background=True)

    # The background shell may not have written its pid yet: the read
    # after the resume would find no file.
    async def pid_written():
        assert (await sbx.files.read("/home/user/shell.pid")).strip()

    await eventually_async(pid_written, "the sleeper's pid file")
    # A handle left open re-opens its stream after the pause (the newest
    # SDK retries), and that traffic resumes the sandbox on space: let go
    # of it, as a client that pauses does.
    await sleeper.disconnect()
    await sbx.pause()
    assert (await AsyncSandbox.get_info(sbx.sandbox_id, **OPTS)).state.value == "paused"
    again = await AsyncSandbox.connect(sbx.sandbox_id, **OPTS)
    assert (await again.get_info()).state.value == "running"
    assert await again.files.read("/home/user/kept.txt") == "kept"
    pid = (await again.files.read("/home/user/shell.pid")).strip()
    assert (await again.commands.run(f"kill -0 {pid} && echo alive")).stdout == "alive\n"


@pytest.mark.skipif("mode" not in inspect.signature(AsyncSandbox.pause).parameters, reason="pause(mode=...) is newer than this e2b")
async def test_pause_without_memory(sbx):
    await sbx.files.write("/home/user/disk.txt", "on disk")
    boot = (await sbx.commands.run("cat /proc/sys/kernel/random/boot_id")).stdout
    sleeper = await sbx.commands.run("sleep 600", background=True)
    await sleeper.disconnect()
    await sbx.pause(mode="filesystem")
    again = await AsyncSandbox.connect(sbx.sandbox_id, **OPTS)
    assert await again.files.read("/home/user/disk.txt") == "on disk"
    assert (await again.commands.run("cat /proc/sys/kernel/random/boot_id")).stdout != boot
    assert "sleep 600" not in (await again.commands.run("ps -eo args")).stdout


@pytest.mark.skipif(not hasattr(AsyncSandbox, "fork"), reason="fork is newer than this e2b")
async def test_fork(sbx):
    await sbx.files.write("/home/user/fork.txt", "forked")
    forks = await sbx.fork(count=1, timeout=120)
    try:
        assert len(forks) == 1
        assert await forks[0].files.read("/home/user/fork.txt") == "forked"
    finally:
        for f in forks:
            if not isinstance(f, Exception):
                await f.kill()


async def test_kill(sbx):
    sid = sbx.sandbox_id
    assert await sbx.kill() is True
    assert await AsyncSandbox.kill(sid, **OPTS) is False
    with pytest.raises(Exception):
        await AsyncSandbox.get_info(sid, **OPTS)
