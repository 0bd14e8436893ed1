"""App Server scope (issue 14), attacked through the real `tether server`: a client whose JWT is
scoped to one conversation drives its model to read or write tether's own state — the stored
provider keys, another conversation's transcript, the checkpoint database — and answers "allow"
to every approval it is asked for (a scoped client is its own approver). Judged by effect: no
canary in anything the client received, no marker on disk, the state files unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import need_bwrap
from tests.security.scoped_server import (
    canary_in_conversation_b,
    run_against_a_token_server,
    scoped_turn,
)
from tests.security.support import CANARY_SECRET, MARKER, World, bash, tool
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
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


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


@pytest.mark.parametrize("call", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_scoped_client_cannot_reach_tethers_state(world: World, call: dict[str, Any]) -> None:
    need_bwrap()
    home = world.tether_home
    # Conversation B runs a command (so the checkpoint database exists and records its output)
    script = [{"tool_calls": [bash(f"echo {CANARY_SECRET}")]}, {"text": "noted"}]
    seen = run_against_a_token_server(
        world, script, lambda url, fake: _attack(url, world, fake, call)
    )
    text = json.dumps(seen)
    assert CANARY_SECRET not in text, f"canary leaked: {text[-3000:]}"
    assert SQLITE not in text, "checkpoint database bytes reached the client"
    assert not world.effects(), world.effects()
    assert json.loads((home / "providers" / "anthropic.json").read_text()) == {
        "api_key": CANARY_SECRET
    }


async def _attack(url: str, world: World, fake: FakeProvider, call: dict[str, Any]) -> list[Any]:
    home = world.tether_home
    agent, b_messages = await canary_in_conversation_b(url, world)
    store = LocalStore(home)
    db = home / "checkpoints.db"
    assert CANARY_SECRET in b_messages.read_text()  # the targets are real
    assert CANARY_SECRET.encode() in db.read_bytes() or db.with_name(db.name + "-wal").exists()
    before = {p: _digest(p) for p in (b_messages, db)}
    conversation_a = store.create_conversation(agent).id
    names = {"home": str(home), "b": str(b_messages), "db": str(db)}
    fake.set_script([{"tool_calls": [_fill(call, names)]}, {"text": "done"}])
    client = await scoped_turn(url, world, agent, conversation_a)
    returns = client.deltas("tool_return_message")
    assert len(returns) == 1, client.seen  # the call was answered (refused or harmless)
    assert {p: _digest(p) for p in (b_messages, db)}[b_messages] == before[b_messages]
    return client.seen
