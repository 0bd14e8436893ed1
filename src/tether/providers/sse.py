"""Incremental Server-Sent Events parsing: the same events whatever way the bytes are chunked."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str  # "message" when the server sent no `event:` field
    data: str  # the `data:` lines joined with "\n"
    id: str | None = None


class SSEParser:
    """Feed raw bytes with `feed()`; it returns the events completed so far (WHATWG rules)."""

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk
        if not self._started and buf:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf  # a BOM may still be arriving
                return []
            self._started = True
            buf = buf.removeprefix(b"\xef\xbb\xbf")
        events: list[SSEEvent] = []
        pos = 0
        while (m := _LINE_END.search(buf, pos)) is not None:
            if m.group() == b"\r" and m.end() == len(buf):
                break  # a lone CR at the end may be the first half of CRLF: wait for more
            event = self._line(buf[pos : m.start()].decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
            pos = m.end()
        self._buf = buf[pos:]
        return events

    def finish(self) -> list[SSEEvent]:
        """End of stream: a trailing CR still ends its line; an event lacking its blank line is dropped."""
        return self.feed(b"\n") if self._buf.endswith(b"\r") else []

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SSEEvent(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None
