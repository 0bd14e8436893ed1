"""Images a tool returns reach the model as images: ViewImage's file and an MCP server's image
content travel in the next request beside the tool result's text, in each wire's own shape."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider


def png(width: int = 2, height: int = 1) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize(("model", "toolset"), [
    ("anthropic/claude-test", "codex"),
    ("bedrock/anthropic.claude-test", "codex"),
    ("openai-chat/gpt-test", "codex"),
    ("openai/gpt-test", "codex"),
    ("google/gemini-test", "codex"),
])
def test_view_image_shows_the_image_to_the_model(workdir: Path, model: str, toolset: str) -> None:
    data = png()
    (workdir / "shot.png").write_bytes(data)
    script = [{"tool_calls": [{"name": "ViewImage", "arguments": {"path": "shot.png"}}]},
              {"text": "a red pixel pair"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "look", "--model", model, "--toolset", toolset,
                          "--output-format", "stream-json"], env=tether_env(fake.url, model), cwd=workdir)
        assert fake.violations == []
        second = json.dumps(fake.requests[1]["body"])
    assert run.code == 0, run.stderr
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "success" and "image/png, 2x1" in ret["tool_return"]
    assert base64.b64encode(data).decode() in second  # the pixels themselves, not a description
