"""End to end: the MCP reference server from npm (`@modelcontextprotocol/server-everything`) over
stdio and streamable HTTP, under the real `tether` command. `scripts/install-mcp-servers` (run by
`.ci/run`) installs it; missing, these tests fail and say how to get it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_mcp import _free_port, _wait_for_port, call, returns, run_turns, write_settings

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / ".cache/mcp-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


@pytest.fixture(scope="module")
def node_entry() -> list[str]:
    node = shutil.which("node")
    if node is None or not ENTRY.is_file():
        pytest.fail("the npm MCP server-everything is required by this test and missing here: "
                    "run ./scripts/install-mcp-servers (needs node and npm)")
    return [node, str(ENTRY)]


def test_everything_over_stdio(workdir: Path, tether_home: Path, node_entry: list[str]) -> None:
    write_settings(tether_home, {"mcpServers": {"everything": {
        "command": node_entry[0], "args": [node_entry[1], "stdio"]}}})
    script = [
        {"tool_calls": [call("mcp__everything__echo", message="hello mcp"),
                        call("mcp__everything__get-sum", a=2, b=40),
                        call("mcp__everything__get-tiny-image")]},
        {"text": "ok"},
    ]
    run, bodies = run_turns(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    echo, total, image = returns(run)
    assert "hello mcp" in echo["tool_return"]
    assert "42" in total["tool_return"]
    assert "[image: image/png" in image["tool_return"]
    assert "hello mcp" in str(bodies[1]["messages"][-1])
    # the image itself reaches the model, as an image block of the tool result
    results = bodies[1]["messages"][-1]["content"]
    assert any(block.get("type") == "image" for r in results for block in r.get("content", [])
               if isinstance(block, dict)), results


def test_everything_over_streamable_http(workdir: Path, tether_home: Path, node_entry: list[str]) -> None:
    port = _free_port()
    server = subprocess.Popen([*node_entry, "streamableHttp"], env={**os.environ, "PORT": str(port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        write_settings(tether_home, {"mcpServers": {"web": {
            "type": "http", "url": f"http://127.0.0.1:{port}/mcp"}}})
        script = [{"tool_calls": [call("mcp__web__echo", message="over http")]}, {"text": "ok"}]
        run, _ = run_turns(workdir, script, "--yolo")
        assert run.code == 0, run.stderr
        assert "over http" in returns(run)[0]["tool_return"]
    finally:
        server.kill()
        server.wait()
