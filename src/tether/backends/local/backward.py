"""Reading a file's LF-terminated lines from its end towards its start, a block at a time, so a
reader that needs only the last few lines of a long file never reads the rest."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import orjson

_FIRST_BLOCK = 1 << 16


def first_line_json(fd: int, limit: int) -> tuple[Any, int] | None:
    """The JSON document on `fd`'s first line (read within its first `limit` bytes) and the
    offset just past that line; None when there is no whole first line or it is not JSON."""
    head = os.pread(fd, limit, 0)
    newline = head.find(b"\n")
    if newline < 0:
        return None
    try:
        return orjson.loads(head[:newline]), newline + 1
    except orjson.JSONDecodeError:
        return None


class ShortRead(Exception):
    """The file shrank under the reader: whatever it was reading back is no longer there."""


def backward_lines(fd: int, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
    """The lines of `fd`'s bytes [lo, hi), last first, as (offset, line without its LF).

    `lo` must start a line and the byte before `hi` must be the LF that ends the last one (or
    `hi == lo`). Blocks double as the walk goes on, so a long walk costs few reads."""
    pos, data, stop = hi, b"", 0  # data holds bytes [pos, pos + len(data)); lines end before stop
    block = _FIRST_BLOCK
    while True:
        # Every line in `data` with an LF before it is whole; the first may start before pos.
        i = data.rfind(b"\n", 0, stop - 1) if stop else -1
        while i >= 0:
            yield pos + i + 1, data[i + 1 : stop - 1]
            stop = i + 1
            i = data.rfind(b"\n", 0, stop - 1)
        if pos <= lo:
            if stop:
                yield pos, data[: stop - 1]
            return
        start = max(lo, pos - block)
        chunk = os.pread(fd, pos - start, start)
        if len(chunk) != pos - start:
            raise ShortRead
        data = chunk + data[:stop]
        stop += len(chunk)
        pos = start
        block = min(block * 2, 1 << 24)
