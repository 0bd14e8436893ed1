"""A stdio MCP server that starts, lists its tools, and then never answers a tools/call.

`python -m tests.mcp.servers.hanging`. It speaks the initialize / tools/list handshake through the
official SDK's MCPServer; its one tool, `hang`, freezes the whole server: the event loop blocks, so
it reads nothing more (no cancellation notice, no end of stdin) and ignores SIGTERM, SIGINT and
SIGHUP; so does reading its resource `hang://forever` — the worst a server can do short of escaping its process group. When `HANGING_MARK` names
a file, the server writes its pid there as the call arrives, so a test knows the call is in flight.
"""

from __future__ import annotations

import os
import signal
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("hanging")


def _freeze() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    mark = os.environ.get("HANGING_MARK")
    if mark:
        with open(mark, "w") as f:
            f.write(str(os.getpid()))
    while True:
        time.sleep(3600)  # blocks the event loop: nothing is read or answered again


@server.tool()
async def hang(text: str = "") -> str:
    """Never return."""
    _freeze()
    return text


@server.resource("hang://forever")
async def forever() -> str:
    """A resource that is never read."""
    _freeze()
    return ""


if __name__ == "__main__":
    server.run()
