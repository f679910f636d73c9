"""The sync client (e2b.Sandbox) through one sandbox, in order: the same
ground as compat/e2b-js/lib/suite.mjs."""

import time

import httpx
import pytest
from e2b import CommandExitException, FileType, Sandbox, SandboxQuery, SandboxState
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import WriteEntry

from e2b.sandbox_sync.commands.command import Commands

from helpers import OPTS, TEMPLATE, eventually, tag

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LABEL = tag("py-sync")


@pytest.fixture(scope="module")
def sbx():
    s = Sandbox.create(TEMPLATE, timeout=300, metadata={"suite": LABEL}, envs={"SUITE_GREETING": "hello"}, **OPTS)
    yield s
    try:
        s.kill()
    except Exception:  # noqa: BLE001 - the kill test kills it first
        pass


def test_create_with_metadata_and_envs(sbx):
    r = sbx.commands.run("echo $SUITE_GREETING; whoami; pwd")
    assert r.exit_code == 0
    assert r.stdout == "hello\nuser\n/home/user\n"
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.metadata["suite"] == LABEL
    assert info.state.value == "running"
    assert info.end_at > info.started_at
    assert info.template_id
    assert sbx.is_running()


def test_commands(sbx):
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo oops >&2; exit 7")
    assert failed.value.exit_code == 7
    assert failed.value.stderr == "oops\n"

    # envs and cwd per command
    r = sbx.commands.run("echo $PER_CALL; pwd", envs={"PER_CALL": "call"}, cwd="/tmp")
    assert r.stdout == "call\n/tmp\n"

    chunks = []
    # The sync handle delivers output while it is waited on.
    bg = sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.1; done", background=True)
    assert bg.wait(on_stdout=chunks.append).stdout == "line1\nline2\nline3\n"
    assert "".join(chunks) == "line1\nline2\nline3\n"

    head = sbx.commands.run("head -n1", background=True, stdin=True)
    sbx.commands.send_stdin(head.pid, "through stdin\n")
    assert head.wait().stdout == "through stdin\n"

    sleeper = sbx.commands.run("sleep 300", background=True)
    listed = sbx.commands.list()
    assert any(p.pid == sleeper.pid for p in listed), listed
    assert sbx.commands.kill(sleeper.pid) is True
    with pytest.raises(Exception):
        sleeper.wait()
    assert sbx.commands.kill(sleeper.pid) is False

    counter = sbx.commands.run("for i in 1 2 3 4 5; do echo n$i; sleep 0.2; done", background=True)
    counter.disconnect()
    attached = sbx.commands.connect(counter.pid)
    assert attached.wait().stdout.endswith("n5\n")

    # A command timeout ends the command with an error.
    with pytest.raises(Exception):
        sbx.commands.run("sleep 30", timeout=1)


@pytest.mark.skipif(not hasattr(Commands, "close_stdin"), reason="commands.close_stdin is newer than this e2b")
def test_close_stdin(sbx):
    cat = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(cat.pid, "to eof\n")
    sbx.commands.close_stdin(cat.pid)
    assert cat.wait().stdout == "to eof\n"


def test_files(sbx):
    info = sbx.files.write("/home/user/notes/a.txt", "text content")
    assert info.path == "/home/user/notes/a.txt"
    assert sbx.files.read("/home/user/notes/a.txt") == "text content"
    assert sbx.files.read("notes/a.txt") == "text content"  # relative to home

    binary = bytes([0, 1, 2, 200, 255])
    sbx.files.write("/home/user/notes/bin.dat", binary)
    assert bytes(sbx.files.read("/home/user/notes/bin.dat", format="bytes")) == binary
    streamed = b"".join(sbx.files.read("/home/user/notes/bin.dat", format="stream"))
    assert streamed == binary

    many = sbx.files.write_files([
        WriteEntry(path="/home/user/notes/deep/one.txt", data="1"),
        WriteEntry(path="/home/user/notes/deep/two.txt", data="2"),
    ])
    assert len(many) == 2

    assert sorted(e.name for e in sbx.files.list("/home/user/notes")) == ["a.txt", "bin.dat", "deep"]
    deep = sbx.files.list("/home/user/notes", depth=2)
    assert any(e.path == "/home/user/notes/deep/two.txt" for e in deep)

    assert sbx.files.exists("/home/user/notes/a.txt") is True
    assert sbx.files.exists("/home/user/notes/missing") is False
    stat = sbx.files.get_info("/home/user/notes/a.txt")
    assert stat.type == FileType.FILE
    assert stat.size == len("text content")
    assert sbx.files.get_info("/home/user/notes/deep").type == FileType.DIR

    assert sbx.files.make_dir("/home/user/made") is True
    assert sbx.files.make_dir("/home/user/made") is False
    sbx.files.rename("/home/user/notes/a.txt", "/home/user/made/b.txt")
    assert sbx.files.read("/home/user/made/b.txt") == "text content"
    sbx.files.remove("/home/user/made")
    assert sbx.files.exists("/home/user/made") is False
    with pytest.raises(Exception):
        sbx.files.read("/home/user/made/b.txt")


def test_watch_dir(sbx):
    sbx.files.make_dir("/home/user/watched")
    handle = sbx.files.watch_dir("/home/user/watched")
    try:
        sbx.files.write("/home/user/watched/new.txt", "x")
        seen = []

        def check():
            seen.extend(handle.get_new_events())
            assert any(e.name == "new.txt" for e in seen), seen

        eventually(check, "watch event")
    finally:
        handle.stop()


def test_signed_urls(sbx):
    upload = sbx.upload_url("/home/user/uploaded.txt")
    up = httpx.post(upload, files={"file": ("uploaded.txt", b"via signed url")}, **_client_opts())
    assert up.status_code == 200, up.text
    down = httpx.get(sbx.download_url("/home/user/uploaded.txt"), **_client_opts())
    assert down.status_code == 200
    assert down.text == "via signed url"
    forged = httpx.URL(sbx.download_url("/home/user/uploaded.txt")).copy_set_param("path", "/etc/shadow")
    assert httpx.get(forged, **_client_opts()).status_code != 200


def _client_opts():
    return {"proxy": OPTS["proxy"]} if OPTS else {}


def test_pty(sbx):
    out = bytearray()
    pty = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(pty.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(pty.pid, b"echo pty-$((6*7)); stty size; exit\n")
    pty.wait(on_pty=out.extend)
    text = out.decode(errors="replace")
    assert "pty-42" in text, text
    assert "30 100" in text, text


def test_metrics_list_timeout(sbx):
    metrics = eventually(lambda: _nonempty(sbx.get_metrics()), "metrics")
    assert metrics[0].mem_total > 0
    assert metrics[0].cpu_count >= 1

    page = Sandbox.list(query=SandboxQuery(metadata={"suite": LABEL}, state=[SandboxState.RUNNING]), **OPTS)
    items = page.next_items()
    assert [s.sandbox_id for s in items] == [sbx.sandbox_id]
    assert page.has_next is False
    none = Sandbox.list(query=SandboxQuery(metadata={"suite": LABEL}, state=[SandboxState.PAUSED]), **OPTS).next_items()
    assert none == []

    before = sbx.get_info().end_at
    sbx.set_timeout(900)
    assert sbx.get_info().end_at > before


def _nonempty(xs):
    assert xs, xs
    return xs


def test_pause_connect(sbx):
    sbx.files.write("/home/user/kept.txt", "kept across pause")
    # The first tick before the pause: the loop may not have written one
    # by then, and the read after the resume would find no file.
    sbx.commands.run("date +%s%N > /home/user/tick")
    ticker = sbx.commands.run("while true; do date +%s%N > /home/user/tick.new; mv /home/user/tick.new /home/user/tick; sleep 0.1; done", background=True)
    ticker.disconnect()
    sbx.pause()
    assert Sandbox.get_info(sbx.sandbox_id, **OPTS).state.value == "paused"

    again = Sandbox.connect(sbx.sandbox_id, **OPTS)
    assert again.get_info().state.value == "running"
    assert again.files.read("/home/user/kept.txt") == "kept across pause"
    assert any(p.pid == ticker.pid for p in again.commands.list()), "ticker survived"
    t1 = again.files.read("/home/user/tick")
    time.sleep(0.4)
    assert again.files.read("/home/user/tick") != t1
    again.commands.kill(ticker.pid)


def test_snapshots(sbx):
    sbx.files.write("/home/user/snap.txt", "at snapshot")
    snap = sbx.create_snapshot()
    assert snap.snapshot_id
    listed = sbx.list_snapshots().next_items()
    assert any(s.snapshot_id == snap.snapshot_id for s in listed)
    restored = Sandbox.create(snap.snapshot_id, timeout=120, **OPTS)
    try:
        assert restored.files.read("/home/user/snap.txt") == "at snapshot"
    finally:
        restored.kill()
    assert Sandbox.delete_snapshot(snap.snapshot_id, **OPTS) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id, **OPTS) is False


@pytest.mark.skipif(not hasattr(Sandbox, "fork"), reason="fork is newer than this e2b")
def test_fork(sbx):
    sbx.files.write("/home/user/fork.txt", "before fork")
    forks = sbx.fork(count=2, timeout=120)
    assert len(forks) == 2
    try:
        for f in forks:
            assert not isinstance(f, Exception), f
            assert f.sandbox_id != sbx.sandbox_id
            assert f.files.read("/home/user/fork.txt") == "before fork"
            assert f.commands.run("hostname").stdout.strip() == f.sandbox_id
    finally:
        for f in forks:
            if not isinstance(f, Exception):
                f.kill()


def test_kill(sbx):
    sid = sbx.sandbox_id
    assert sbx.kill() is True
    assert Sandbox.kill(sid, **OPTS) is False
    assert sbx.is_running() is False
    with pytest.raises(Exception):
        Sandbox.get_info(sid, **OPTS)
