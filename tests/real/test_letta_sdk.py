"""The real Letta Code SDK (npm, 0.1.14) drives the tether command, unchanged.

The SDK spawns `node $LETTA_CLI_PATH …`; a two-line Node shim that spawns `tether` with the same
argv and stdio stands in for the Letta Code CLI (`shared/reference/real-clients.md`). Because the
SDK silently falls back to its bundled CLI when the shim is missing, the test also checks that
tether's own store holds the agent and that the fake provider saw tether's requests.

Needs `./scripts/install-letta-sdk` (npm); CI runs it. Locally the test skips naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.support import TETHER, tether_env
from tether.testing.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / ".cache" / "letta-sdk" / "node_modules" / "@letta-ai" / "letta-code-sdk" / "dist" / "index.js"
MODEL = "anthropic/claude-test"

SHIM = """\
import { spawn } from "node:child_process";
const child = spawn(process.env.TETHER_BIN, process.argv.slice(2), { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => child.kill(sig));
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
"""

DRIVER = """\
import { createSession } from "SDK_URL";
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\\n");
const asked = [];
const session = createSession(undefined, {
  model: "MODEL",
  cwd: process.env.WORKDIR,
  canUseTool: async (toolName, toolInput) => {
    asked.push({ toolName, toolInput });
    return { behavior: "allow", updatedInput: { ...toolInput, command: "echo rewritten > sdk.txt" } };
  },
  tools: [{
    label: "Shout", name: "shout", description: "Upper-cases text",
    parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    execute: async (id, args) => ({ content: [{ type: "text", text: String(args.text).toUpperCase() }] }),
  }],
});
for (const prompt of ["say hello", "write the file", "shout please"]) {
  await session.send(prompt);
  for await (const msg of session.stream()) {
    out({ prompt, ...msg });
  }
}
out({ type: "asked", asked, agentId: session.agentId, conversationId: session.conversationId });
session.close();
"""


def _need_sdk() -> None:
    if SDK.exists() and shutil.which("node"):
        return
    message = "optional extra not installed: the Letta Code SDK (./scripts/install-letta-sdk, needs npm)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def test_the_letta_code_sdk_drives_tether(tmp_path: Path, tether_home: Path) -> None:
    _need_sdk()
    workdir = tmp_path / "project"
    workdir.mkdir()
    shim = tmp_path / "letta-shim.mjs"
    shim.write_text(SHIM)
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER.replace("SDK_URL", SDK.as_uri()).replace("MODEL", MODEL))
    script = [
        {"text": "Hello from tether"},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo original > a.txt",
                                                        "description": "write"}}]},
        {"text": "wrote it"},
        {"tool_calls": [{"name": "shout", "arguments": {"text": "quiet words"}}]},
        {"text": "shouted"},
    ]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL, {"LETTA_CLI_PATH": str(shim), "TETHER_BIN": TETHER,
                                           "WORKDIR": str(workdir)})
        proc = subprocess.run(["node", str(driver)], capture_output=True, text=True, env=env,
                              cwd=workdir, timeout=120)
        requests = fake.requests
        assert fake.violations == []
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [m for m in lines if m.get("type") == "result"]
    assert [r.get("success", r.get("subtype") == "success") for r in results] == [True] * 3, results
    assistant = [m["content"] for m in lines if m.get("type") == "assistant"]
    assert "Hello from tether" in "".join(assistant)
    summary = lines[-1]
    assert summary["type"] == "asked" and summary["asked"][0]["toolName"] == "Bash"
    # updatedInput replaced the arguments; the external tool ran in the SDK process.
    assert (workdir / "sdk.txt").read_text() == "rewritten\n" and not (workdir / "a.txt").exists()
    assert "QUIET WORDS" in json.dumps(requests[-1]["body"])
    # It was tether, not the SDK's bundled CLI: tether's store has the agent.
    agents = list((tether_home / "agents").glob("*.json"))
    assert agents and summary["agentId"] in {json.loads(a.read_text())["id"] for a in agents}
