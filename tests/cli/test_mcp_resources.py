"""MCP resource tools are read-only: in the default mode they run without asking."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
REPO = Path(__file__).resolve().parents[2]
TOYBOX = {"command": sys.executable, "args": ["-m", "tests.mcp.servers.toybox"], "cwd": str(REPO)}


def test_resource_tools_run_without_approval_in_standard_mode(workdir: Path, tether_home: Path) -> None:
    tether_home.mkdir(parents=True)
    (tether_home / "settings.json").write_text(json.dumps({"mcpServers": {"toy": TOYBOX}}))
    script = [{"tool_calls": [{"name": "ListMcpResources", "arguments": {}},
                              {"name": "ReadMcpResource", "arguments": {"server": "toy", "uri": "toy://readme"}}]},
              {"text": "ok"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=120)
    assert run.code == 0, run.stderr
    returned = {r["tool_call_id"]: r for r in run.of_type("message", "tool_return_message")}
    assert len(returned) == 2
    assert all(r["status"] == "success" for r in returned.values()), returned
    assert any(r["tool_return"] == "the toybox readme" for r in returned.values())
