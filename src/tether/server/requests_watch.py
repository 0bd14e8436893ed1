"""`watch_file` / `unwatch_file` (reference §12.3): a connection asks to hear when a workspace
file changes on disk and gets `file_changed {path, lastModified}` (ms) each time its
modification time moves. A watch is a small poll per file on the server's loop, checked with
the same workspace line as `read_file`, and ends with `unwatch_file` or the connection; like
the reference, neither request has a `_response` (a refusal is an `error` frame)."""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import TYPE_CHECKING, Any

from tether.server.request_kit import Call, Request, RequestFailed, Scope, request
from tether.server.requests_files import workspace

if TYPE_CHECKING:
    from tether.server.app_server import Connection

POLL_SECONDS = 0.25
MAX_WATCHES = 256  # per connection

_watches: weakref.WeakKeyDictionary[Connection, dict[str, asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary())


def _mtime_ms(real: str) -> int | None:
    try:
        return os.stat(real).st_mtime_ns // 1_000_000
    except OSError:
        return None


async def _poll(conn: Connection, shown: str, real: str) -> None:
    last = _mtime_ms(real)
    while not conn.closed:
        await asyncio.sleep(POLL_SECONDS)
        now = _mtime_ms(real)
        if now is not None and now != last:
            conn.send_frame({"type": "file_changed", "path": shown, "lastModified": now})
        last = now
    _watches.get(conn, {}).pop(shown, None)


def watch_file(call: Call) -> dict[str, Any]:
    shown, real = workspace(call).check(call.text("path"))
    if not os.path.isfile(real):
        raise RequestFailed(f"{shown}: no such file")
    held = _watches.setdefault(call.conn, {})
    if shown not in held:
        if len(held) >= MAX_WATCHES:
            raise RequestFailed(f"this connection already watches {MAX_WATCHES} files; "
                                "unwatch_file one first")
        held[shown] = asyncio.ensure_future(_poll(call.conn, shown, real))
    return {}


def unwatch_file(call: Call) -> dict[str, Any]:
    task = _watches.get(call.conn, {}).pop(call.text("path"), None)
    if task is not None:
        task.cancel()  # it sends nothing more from here
    return {}


FAMILY: dict[str, Request] = {
    "watch_file": request("path", watch_file, Scope.OWN, answered=False),
    "unwatch_file": request("path", unwatch_file, Scope.OWN, answered=False),
}
