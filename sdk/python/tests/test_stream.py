"""Streaming resume and error decoding against a fake transport: a stream
cut in the middle is reopened with Last-Event-ID at the last offset
delivered, and what the server resends is not delivered twice."""

import asyncio
import json

import httpx
import pytest

from space_sandbox import APIError, AsyncClient, Client, NotFoundError, StreamError
from space_sandbox._sse import SSEParser


def chunk(kind, text, end):
    return f"event: {kind}\nid: {end}\ndata: {json.dumps({'text': text})}\n\n".encode()


class Cut(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Sends parts, then fails like a dropped connection (or ends)."""

    def __init__(self, parts, fail=True):
        self.parts, self.fail = parts, fail

    def __iter__(self):
        yield from self.parts
        if self.fail:
            raise httpx.ReadError("connection reset")

    async def __aiter__(self):
        for p in self.parts:
            yield p
        if self.fail:
            raise httpx.ReadError("connection reset")


def fake_server():
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append((req.url.params.get("from"), req.headers.get("Last-Event-ID")))
        sse = {"Content-Type": "text/event-stream"}
        if len(seen) == 1:
            # "hello " then half an event: the connection drops.
            return httpx.Response(200, headers=sse, stream=Cut([chunk("stdout", "hello ", 6), b"event: stdout\nid: 1"]))
        if len(seen) == 2:
            # The server resends from an earlier offset than asked (overlap),
            # then ends the stream without an exit event.
            return httpx.Response(200, headers=sse, stream=Cut([b": keepalive\n\n", chunk("stdout", "lo world", 11)], fail=False))
        return httpx.Response(200, headers=sse, stream=Cut([
            b"event: exit\r\nid: 11\r\ndata: {\"exit_code\": 3}\r\n\r\n"], fail=False))

    return handler, seen


def test_sync_attach_resumes_without_duplicates():
    handler, seen = fake_server()
    c = Client("http://space.test", api_key="k", transport=httpx.MockTransport(handler))
    c._sleep = lambda s: None
    events = list(c.attach("sb1", "s1", offset=0))
    out = b"".join(e.data for e in events if e.type == "stdout")
    assert out == b"hello world"
    assert events[-1].type == "exit" and events[-1].exit_code == 3 and events[-1].offset == 11
    assert seen == [(None, None), (None, "6"), (None, "11")]


def test_async_attach_resumes_without_duplicates():
    handler, seen = fake_server()

    async def run():
        c = AsyncClient("http://space.test", api_key="k", transport=httpx.MockTransport(handler))

        async def nosleep(s):
            return None
        c._sleep = nosleep
        got = [e async for e in c.attach("sb1", "s1")]
        await c.close()
        return got
    events = asyncio.run(run())
    assert b"".join(e.data for e in events if e.type == "stdout") == b"hello world"
    assert events[-1].exit_code == 3
    assert seen[1] == (None, "6")


def test_attach_from_offset_uses_from_first():
    seen = []

    def handler(req):
        seen.append((req.url.params.get("from"), req.headers.get("Last-Event-ID")))
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              stream=Cut([b'event: exit\nid: 40\ndata: {"exit_code":0}\n\n'], fail=False))
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    assert [e.type for e in c.attach("a", "b", offset=40)] == ["exit"]
    assert seen == [("40", None)]


def test_stream_gives_up_after_bounded_failures():
    def handler(req):
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, stream=Cut([b"retry: 1\n\n"]))
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    c._sleep = lambda s: None
    it = c.attach("a", "b")
    # The first connection succeeds, so failures are reconnects.
    with pytest.raises(StreamError):
        list(it)


def test_errors_carry_code_and_message():
    def handler(req):
        if req.url.path.endswith("/gone"):
            return httpx.Response(404, json={"code": 404, "message": "sandbox gone not found"})
        return httpx.Response(502, text="<html>bad gateway</html>")
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    with pytest.raises(NotFoundError) as e:
        c.get_sandbox("gone")
    assert e.value.code == 404 and e.value.message == "sandbox gone not found"
    with pytest.raises(APIError) as e:
        c.get_sandbox("other")
    assert e.value.code == 502 and "bad gateway" in e.value.message


def test_attach_error_is_api_error():
    def handler(req):
        return httpx.Response(404, json={"code": 404, "message": "session s not found"})
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    with pytest.raises(NotFoundError):
        list(c.attach("a", "s"))


def test_path_parameters_are_escaped():
    urls = []

    def handler(req):
        urls.append(req.url.raw_path)
        return httpx.Response(200, json={"id": "x"})
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    c.get_sandbox("../keys")
    assert urls == [b"/v1/sandboxes/..%2Fkeys"]
    with pytest.raises(ValueError):
        c.get_sandbox("")


def test_sse_parser_rules():
    p = SSEParser()
    evs = list(p.feed(b"\xef\xbb\xbf: c\ndata: a\ndata: b\r"))
    assert evs == []
    evs = list(p.feed(b"\n\nevent: x\ndata:y\n\n"))
    assert [(e.type, e.data) for e in evs] == [("message", "a\nb"), ("x", "y")]


def test_request_shapes():
    """What a few methods send: body, query and method, as the spec says."""
    sent = []

    def handler(req):
        sent.append((req.method, req.url.path, dict(req.url.params), req.content))
        return httpx.Response(202, json={"id": "sb1", "name": "t"})
    c = Client("http://space.test", transport=httpx.MockTransport(handler))
    c.create_sandbox("minimal", env={"A": "1"}, volume_mounts=[{"volume": "v", "path": "/mnt"}],
                     network={"deny": ["x.test"]}, auto_resume=False, vcpus=None)
    c.create_template("from: minimal\n", name="mine")
    c.list_sandboxes(state="running", metadata={"b": "2", "a": "1"})
    c.write_stdin("sb1", "s1", "hi", close=True)
    c.suspend("sb1", keep_memory=False)
    assert sent[0][:2] == ("POST", "/v1/sandboxes")
    assert json.loads(sent[0][3]) == {"template": "minimal", "env": {"A": "1"}, "auto_resume": False,
                                      "network": {"deny": ["x.test"]}, "volume_mounts": [{"volume": "v", "path": "/mnt"}]}
    assert sent[1][:2] == ("POST", "/v1/templates") and json.loads(sent[1][3]) == {"name": "mine", "recipe": "from: minimal\n"}
    assert sent[2][2] == {"state": "running", "metadata.a": "1", "metadata.b": "2"}
    assert sent[3][1:] == ("/v1/sandboxes/sb1/sessions/s1/stdin", {"close": "true"}, b"hi")
    assert json.loads(sent[4][3]) == {"keep_memory": False}


def test_async_attach_error_is_api_error():
    def handler(req):
        return httpx.Response(404, json={"code": 404, "message": "session s not found"})

    async def run():
        async with AsyncClient("http://space.test", transport=httpx.MockTransport(handler)) as c:
            with pytest.raises(NotFoundError) as e:
                [ev async for ev in c.attach("a", "s")]
            assert e.value.message == "session s not found"
    asyncio.run(run())
