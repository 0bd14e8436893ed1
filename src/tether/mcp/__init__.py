"""MCP servers as tool sources: configuration (`config`), clients (`client`), tools (`tools`).

Only `config` is imported on a run's start path, and only when some source names a server; the
official `mcp` SDK (an optional extra, `pip install 'tether[mcp]'`) loads when a server starts.
"""
