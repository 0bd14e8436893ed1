"""The real Letta Code SDK (npm) against tether, option by option (issue 18 item 6): resuming by
the ids tether printed, closing a session mid-turn, memory blocks from `memory`/`persona`/`human`.

Same shim as tests/real/test_letta_sdk.py: a two-line Node script that spawns `tether`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER, tether_env
from tests.real.test_letta_sdk import MODEL, SDK, SHIM, _need_sdk
from tether.testing.fake_provider import FakeProvider

DRIVER = """\
import { createSession, resumeSession } from "SDK_URL";
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\\n");
const cwd = process.env.WORKDIR;
const mode = process.env.MODE;
async function turn(session, text) {
  await session.send(text);
  for await (const msg of session.stream()) out({ text, ...msg });
}
if (mode === "close") {
  const session = createSession(undefined, { model: "MODEL", cwd, permissionMode: "bypassPermissions" });
  await session.send("start the long job");
  for await (const msg of session.stream()) {
    out(msg);
    if (msg.type === "tool_call") {
      await new Promise((r) => setTimeout(r, 1500));  // the tool is running now
      session.close();
      break;
    }
  }
  out({ type: "closed" });
} else if (mode === "resume") {
  const first = createSession(undefined, { model: "MODEL", cwd });
  await turn(first, "remember the word kumquat");
  const ids = { agentId: first.agentId, conversationId: first.conversationId };
  first.close();
  out({ type: "ids", ...ids });
  const byConversation = resumeSession(ids.conversationId, { model: "MODEL", cwd });
  await turn(byConversation, "what was the word");
  out({ type: "resumed", conversationId: byConversation.conversationId });
  byConversation.close();
} else if (mode === "blocks") {
  const session = createSession(undefined, {
    model: "MODEL", cwd, memory: ["persona", "human", { label: "project", value: "A Rust CLI." }],
  });
  await turn(session, "hello");
  out({ type: "agent", agentId: session.agentId });
  session.close();
}
"""


def drive(tmp_path: Path, mode: str, script: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], FakeProvider, Path]:
    _need_sdk()
    workdir = tmp_path / "project"
    workdir.mkdir(exist_ok=True)
    shim = tmp_path / "letta-shim.mjs"
    shim.write_text(SHIM)
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER.replace("SDK_URL", SDK.as_uri()).replace("MODEL", MODEL))
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL, {"LETTA_CLI_PATH": str(shim), "TETHER_BIN": TETHER,
                                           "WORKDIR": str(workdir), "MODE": mode})
        proc = subprocess.run(["node", str(driver)], capture_output=True, text=True, env=env,
                              cwd=workdir, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return lines, fake, workdir


def test_closing_the_session_mid_turn_stops_the_tool(tmp_path: Path, tether_home: Path) -> None:
    long_job = {"name": "Bash", "arguments": {
        "command": "sleep 30 & echo $! > child.pid; wait; touch finished", "description": "long"}}
    lines, fake, workdir = drive(tmp_path, "close", [{"tool_calls": [long_job]},
                                                     {"tool_calls": [long_job]}, {"text": "never"}])
    assert lines[-1] == {"type": "closed"} and any(m.get("type") == "tool_call" for m in lines)
    child = int((workdir / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
    time.sleep(0.5)
    assert not (workdir / "finished").exists()
    assert len(fake.requests) == 1  # nothing more was asked of the model after the client left


def test_resume_session_by_the_conversation_id_tether_printed(tmp_path: Path, tether_home: Path) -> None:
    lines, fake, _ = drive(tmp_path, "resume", [{"text": "noted"}, {"text": "kumquat"}])
    ids = next(m for m in lines if m["type"] == "ids")
    resumed = next(m for m in lines if m["type"] == "resumed")
    assert resumed["conversationId"] == ids["conversationId"]
    second = json.dumps(fake.requests[1]["body"])
    assert "remember the word kumquat" in second  # the same conversation's history was sent


def test_memory_blocks_from_the_sdk_options(tmp_path: Path, tether_home: Path) -> None:
    lines, fake, _ = drive(tmp_path, "blocks", [{"text": "hi"}])
    system = json.dumps(fake.requests[0]["body"]["system"])
    # with a custom block the SDK sends only --memory-blocks (it warns that presets are ignored)
    assert "system/project.md" in system and "A Rust CLI." in system


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
