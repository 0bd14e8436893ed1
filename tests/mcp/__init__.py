"""MCP configuration, clients and tools."""
