"""Server-sent events: a parser fed with bytes, and the decoders of the two
streams of the API (session output and template build logs) that track the
position to resume from."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional


@dataclass
class RawEvent:
    type: str
    data: str
    id: Optional[str]  # the id this event set itself, None if it set none


class SSEParser:
    """Incremental text/event-stream parser (HTML spec rules: any line end,
    comments, multi-line data; an event cut off by the end is dropped)."""

    def __init__(self) -> None:
        self._buf = b""
        self._type = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._seen = False
        self._started = False
        self.retry_ms: Optional[int] = None

    def feed(self, chunk: bytes) -> Iterator[RawEvent]:
        if not self._started and chunk:
            self._started = True
            if chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
        self._buf += chunk
        while True:
            cut = -1
            for i, b in enumerate(self._buf):
                if b in (10, 13):
                    cut = i
                    break
            if cut < 0:
                return
            # A lone "\r" at the end of the buffer may be the first half of "\r\n".
            if self._buf[cut] == 13 and cut == len(self._buf) - 1:
                return
            line = self._buf[:cut].decode("utf-8", "replace")
            skip = 2 if self._buf[cut:cut + 2] == b"\r\n" else 1
            self._buf = self._buf[cut + skip:]
            ev = self._line(line)
            if ev is not None:
                yield ev

    def _line(self, line: str) -> Optional[RawEvent]:
        if line == "":
            if not self._seen:
                self._id = None
                return None
            ev = RawEvent(self._type or "message", "\n".join(self._data), self._id)
            self._type, self._data, self._id, self._seen = "", [], None, False
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type, self._seen = value, True
        elif name == "data":
            self._data.append(value)
            self._seen = True
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None


@dataclass
class Event:
    """One event of a session's output. ``offset`` is the output offset
    after it: pass it to ``attach(..., offset=)`` to continue from there,
    from this client or another one."""

    type: str  # stdout | stderr | pty | truncated | exit, or a newer one
    data: bytes = b""
    offset: int = 0
    exit_code: Optional[int] = None
    error: Optional[str] = None
    truncated: Optional[Dict[str, Any]] = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


class AttachDecoder:
    """Turns raw events into Events, delivering every output byte once even
    when a reconnect makes the server resend some."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.exited = False

    def decode(self, raw: RawEvent) -> Optional[Event]:
        end: Optional[int] = None
        if raw.id is not None and raw.id.isdigit():
            end = int(raw.id)
        if raw.type in ("stdout", "stderr", "pty"):
            chunk = json.loads(raw.data)
            data = base64.b64decode(chunk["base64"]) if chunk.get("base64") else chunk.get("text", "").encode()
            if end is not None:
                if end <= self.offset:
                    return None  # already delivered before a reconnect
                start = end - len(data)
                if start < self.offset:
                    data = data[self.offset - start:]
                self.offset = end
            return Event(raw.type, data, self.offset)
        if raw.type == "truncated":
            t = json.loads(raw.data)
            self.offset = max(self.offset, int(t.get("from", 0)), end or 0)
            return Event("truncated", offset=self.offset, truncated=t)
        if raw.type == "exit":
            e = json.loads(raw.data)
            self.offset = max(self.offset, end or 0)
            self.exited = True
            return Event("exit", offset=self.offset, exit_code=e.get("exit_code"), error=e.get("error") or None)
        if end is not None:
            self.offset = max(self.offset, end)
        return Event(raw.type, raw.data.encode(), self.offset)

    def request(self, first: bool) -> "tuple[Dict[str, str], Dict[str, str]]":
        """Query and headers of the next connection."""
        if first:
            return ({"from": str(self.offset)} if self.offset > 0 else {}), {}
        return {}, {"Last-Event-ID": str(self.offset)}


@dataclass
class LogEvent:
    """One line of a template build log, or the final ``done`` event with
    the template as built (or failed)."""

    line: str = ""
    index: int = 0
    done: bool = False
    template: Optional[Dict[str, Any]] = field(default=None)


class LogDecoder:
    def __init__(self, start: int) -> None:
        self.next_index = start
        self.exited = False

    def decode(self, raw: RawEvent) -> Optional[LogEvent]:
        if raw.type == "log":
            index = self.next_index
            if raw.id is not None and raw.id.isdigit():
                index = int(raw.id) - 1  # ids are index + 1
            if index < self.next_index:
                return None
            try:
                line = json.loads(raw.data)
            except ValueError:
                line = raw.data
            self.next_index = index + 1
            return LogEvent(line=str(line), index=index)
        if raw.type == "done":
            self.exited = True
            return LogEvent(done=True, template=json.loads(raw.data))
        return None

    def request(self, first: bool) -> "tuple[Dict[str, str], Dict[str, str]]":
        q = {"from": str(self.next_index)}
        return q, ({} if first or self.next_index == 0 else {"Last-Event-ID": str(self.next_index)})
