"""The hosted backend: agents and conversations on a Letta API server, turns over HTTP + SSE."""
