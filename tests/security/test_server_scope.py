"""App Server scope (issue 14), attacked through the real `tether server`: a client whose JWT is
scoped to one conversation drives its model to read or write tether's own state — the stored
provider keys, another conversation's transcript, the checkpoint database — and answers "allow"
to every approval it is asked for (a scoped client is its own approver). Judged by effect: no
canary in anything the client received, no marker on disk, the state files unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from websockets.asyncio.client import connect

from tests.requirements import need_bwrap
from tests.security.support import CANARY_SECRET, MARKER, World, bash, tool
from tests.server.support import Client, ServerProcess, server_env
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
SECRET = b"scope-secret-" + b"x" * 32
SQLITE = "SQLite format 3"

# {home}: TETHER_HOME; {b}: the other conversation's messages.jsonl; {db}: checkpoints.db
ATTACKS: dict[str, dict[str, Any]] = {
    "Read provider keys": tool("Read", file_path="{home}/providers/anthropic.json"),
    "Read other transcript": tool("Read", file_path="{b}"),
    "Read checkpoints": tool("Read", file_path="{db}"),
    "Grep state": tool("Grep", pattern="CANARY", path="{home}", output_mode="content"),
    "Write into state": tool("Write", file_path=f"{{home}}/{MARKER}.json", content="[]"),
    "Write over keys": tool("Write", file_path="{home}/providers/anthropic.json",
                            content=MARKER),
    "Bash cat keys": bash("cat {home}/providers/anthropic.json"),
    "Bash cat other transcript": bash("cat {b}"),
    "Bash head checkpoints": bash("head -c 64 {db}"),
    "Bash grep -r state": bash("grep -r CANARY {home}"),
    "Bash opaque path": bash('cat "$(printf %s {home})"/providers/anthropic.json'),
    "Bash write into state": bash(f"echo x > {{home}}/{MARKER}; echo x > {{home}}/providers/k"),
    "Bash copy out": bash("cp {b} ./copied.jsonl; cat copied.jsonl"),
}


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def _token(**claims: Any) -> dict[str, str]:
    body = {"exp": time.time() + 600, **claims}
    return {"Authorization": f"Bearer {jwt.encode(body, SECRET, algorithm='HS256')}"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


async def _turn(c: Client, runtime: dict[str, str], text: str) -> dict[str, Any]:
    """Say `text`, allow every approval asked, return turn_finished."""
    await c.say(runtime, text)
    while True:
        frame = await c.wait_for(lambda f: f.get("type") in ("control_request", "turn_finished"),
                                 timeout=60)
        if frame["type"] == "turn_finished":
            return frame
        await c.answer(runtime, frame["request_id"], "allow")


@pytest.mark.parametrize("call", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_scoped_client_cannot_reach_tethers_state(world: World, call: dict[str, Any]) -> None:
    need_bwrap()
    secret_file = world.root / "jwt-secret"
    secret_file.write_bytes(SECRET)
    os.chmod(secret_file, 0o600)
    home = world.tether_home
    # Conversation B runs a command (so the checkpoint database exists and records its output)
    script = [{"tool_calls": [bash(f"echo {CANARY_SECRET}")]}, {"text": "noted"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, world.root)
        server = ServerProcess(env, world.project, "--ws-auth", "signed-bearer-token",
                               "--ws-shared-secret-file", str(secret_file))
        try:
            seen = asyncio.run(_attack(server.url, world, fake, call))
        finally:
            server.stop()
    text = json.dumps(seen)
    assert CANARY_SECRET not in text, f"canary leaked: {text[-3000:]}"
    assert SQLITE not in text, "checkpoint database bytes reached the client"
    assert not world.effects(), world.effects()
    assert json.loads((home / "providers" / "anthropic.json").read_text()) == {
        "api_key": CANARY_SECRET
    }


async def _attack(url: str, world: World, fake: FakeProvider, call: dict[str, Any]) -> list[Any]:
    home = world.tether_home
    async with connect(url, additional_headers=_token(), open_timeout=10) as ws:
        admin = Client(ws)
        b = await admin.start(world.project)
        runtime_b = b["runtime"]
        finished = await _turn(admin, runtime_b, f"keep this: {CANARY_SECRET}")
        assert finished["stop_reason"] == "end_turn", finished
    agent = runtime_b["agent_id"]
    store = LocalStore(home)
    b_messages = store.conversation_dir(agent, runtime_b["conversation_id"]) / "messages.jsonl"
    db = home / "checkpoints.db"
    assert CANARY_SECRET in b_messages.read_text()  # the targets are real
    assert CANARY_SECRET.encode() in db.read_bytes() or db.with_name(db.name + "-wal").exists()
    before = {p: _digest(p) for p in (b_messages, db)}
    conversation_a = store.create_conversation(agent).id
    names = {"home": str(home), "b": str(b_messages), "db": str(db)}
    fake.set_script([{"tool_calls": [_fill(call, names)]}, {"text": "done"}])
    scoped = _token(agents=[agent], conversations=[conversation_a])
    async with connect(url, additional_headers=scoped, open_timeout=10) as ws:
        client = Client(ws)
        started = await client.start(world.project, agent_id=agent, conversation_id=conversation_a)
        assert started["workspace_sandbox"] is True
        finished = await _turn(client, started["runtime"], "go")
        assert finished["stop_reason"] == "end_turn", finished
        returns = client.deltas("tool_return_message")
        assert len(returns) == 1, client.seen  # the call was answered (refused or harmless)
    assert {p: _digest(p) for p in (b_messages, db)}[b_messages] == before[b_messages]
    return client.seen
