"""Small MCP servers the tests start as real processes."""
