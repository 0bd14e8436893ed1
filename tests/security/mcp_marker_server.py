"""An MCP server whose one tool has an effect on disk: `touch(name)` creates `name` in MARKER_DIR.

`python -m tests.security.mcp_marker_server` (stdio). The attacks on MCP rule names
(`test_mcp_rule_names.py`) judge a call by whether the file appeared, not only by the verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("marker")


@server.tool()
def touch(name: str) -> str:
    """Create the file `name` in the marker directory."""
    path = Path(os.environ["MARKER_DIR"]) / Path(name).name
    path.write_text("made by the MCP server\n")
    return f"created {path.name}"


if __name__ == "__main__":
    server.run()
