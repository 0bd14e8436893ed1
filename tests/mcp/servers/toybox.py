"""A real MCP server (the official SDK's MCPServer) with tools that misbehave on request.

`python -m tests.mcp.servers.toybox [stdio | http PORT | sse PORT]`. Tools: `echo`, `whoami`
(its own pid and process group, so tests can find it), `crash` (the process dies mid-call),
`shout` (an isError result); one resource `toy://readme`; one prompt `review(topic)`.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("toybox")


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def whoami() -> str:
    """This server's pid and process group."""
    return f"pid={os.getpid()} pgid={os.getpgrp()}"


@server.tool()
def crash() -> str:
    """Die in the middle of the call."""
    os._exit(7)


@server.tool()
def shout(text: str) -> str:
    """Fail with `text`."""
    raise ValueError(text.upper())


@server.prompt()
def review(topic: str) -> str:
    """Ask for a review of `topic`."""
    return f"Please review {topic} carefully."


@server.resource("toy://readme")
def readme() -> str:
    return "the toybox readme"


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run()
    else:
        server.run("streamable-http" if mode == "http" else "sse", host="127.0.0.1",
                   port=int(sys.argv[2]))
