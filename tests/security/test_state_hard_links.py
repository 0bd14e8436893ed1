"""Hard links into tether's state (issue 30.8): a file planted in the workspace as a second name of
the stored provider keys, another conversation's transcript or the checkpoint database. Paths
are all a sandbox, a boundary or a rule can see, and the link's path is an ordinary workspace
file; the inode is the state file. No tool may read or write through such a name: the file tools
refuse it (`ReadBoundary.alias_refusal`) and no sandboxed command runs while one exists
(`core.permissions.aliases`). Judged by effect: no canary in anything returned, state unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import need_bwrap
from tests.security.scoped_server import (
    canary_in_conversation_b,
    run_against_a_token_server,
    scoped_turn,
)
from tests.security.support import CANARY_SECRET, World, attempt, bash, tool
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

KEYS = "providers/anthropic.json"


def _plant(world: World, target: Path, name: str = "notes-copy.txt") -> Path:
    link = world.project / name
    os.link(target, link)
    return link


def _keys(world: World) -> str:
    return (world.tether_home / KEYS).read_text()


# -- headless: the file tools in --yolo, the shell in the workspace sandbox ------------------

FILE_TOOLS = {
    "Read": tool("Read", file_path="notes-copy.txt"),
    "Read absolute": tool("Read", file_path="{project}/notes-copy.txt"),
    "Grep the link": tool("Grep", pattern="api_key", path="notes-copy.txt", output_mode="content"),
    "Grep the folder": tool("Grep", pattern="api_key", path=".", output_mode="content"),
    "Edit": tool("Edit", file_path="notes-copy.txt", old_string="api_key", new_string="k"),
    "MultiEdit": tool("MultiEdit", file_path="notes-copy.txt",
                      edits=[{"old_string": "api_key", "new_string": "k"}]),
    "Write": tool("Write", file_path="notes-copy.txt", content="overwritten"),
}


def _fill(call: dict[str, Any], world: World) -> dict[str, Any]:
    args = {k: v.format(project=world.project) if isinstance(v, str) else v
            for k, v in call["arguments"].items()}
    return {**call, "arguments": args}


@pytest.mark.parametrize("name", list(FILE_TOOLS))
def test_file_tools_never_go_through_a_link_into_state(world: World, name: str) -> None:
    link = _plant(world, world.tether_home / KEYS)
    before = _keys(world)
    out = attempt(world, _fill(FILE_TOOLS[name], world), args=["--yolo"],
                  env={"TETHER_FS_SANDBOX": "0"})
    assert out.results, out.explain()
    assert not out.leaked, out.explain()
    assert _keys(world) == before, out.explain()
    assert link.read_text() == before  # nothing written through it, nor in place of it
    if name != "Grep the folder":  # a walk skips it quietly; named, it is refused
        assert "hard link" in out.outputs[0], out.explain()


def test_a_link_to_another_conversations_transcript_is_refused(world: World) -> None:
    transcript = world.tether_home / "conversations" / "other" / "messages.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"text": CANARY_SECRET}) + "\n")
    _plant(world, transcript, "log.jsonl")
    out = attempt(world, tool("Read", file_path="log.jsonl"), args=["--yolo"])
    assert not out.leaked and "hard link" in out.outputs[0], out.explain()


def test_an_ordinary_hard_link_in_the_workspace_still_reads(world: World) -> None:
    os.link(world.project / "README.md", world.project / "README-link.md")
    out = attempt(world, tool("Read", file_path="README-link.md"), args=["--yolo"])
    assert out.statuses == ["success"] and "# demo" in out.outputs[0], out.explain()


SHELL = [
    "cat notes-copy.txt",
    "grep -r api_key .",
    "cp notes-copy.txt copy.txt; cat copy.txt",
    "tar cf - . | tar xOf - ./notes-copy.txt",
    "cat $(ls | grep copy)",
]


@pytest.mark.parametrize("command", SHELL)
def test_no_sandboxed_command_runs_while_state_has_another_name(world: World, command: str) -> None:
    need_bwrap()
    _plant(world, world.tether_home / KEYS)
    out = attempt(world, bash(command), args=["--yolo"], env={"TETHER_FS_SANDBOX": "1"})
    assert out.results, out.explain()
    assert not out.leaked, out.explain()
    assert "hard link" in out.outputs[0], out.explain()


def test_the_confined_read_only_auto_allow_refuses_too(world: World) -> None:
    need_bwrap()
    _plant(world, world.tether_home / KEYS)
    out = attempt(world, bash("grep -rn api_key ."))  # standard mode: read-only, confined
    assert not out.leaked, out.explain()
    assert "hard link" in out.outputs[0], out.explain()


# -- a scoped App Server client (issue 30.8's own example) ----------------------------------

ATTACKS = {
    "Read keys link": tool("Read", file_path="k.json"),
    "Read transcript link": tool("Read", file_path="b.jsonl"),
    "Grep transcript link": tool("Grep", pattern="CANARY", path="b.jsonl", output_mode="content"),
    "Edit keys link": tool("Edit", file_path="k.json", old_string="api_key", new_string="x"),
    "Bash cat links": bash("cat k.json b.jsonl"),
    "Bash grep -r": bash("grep -r CANARY ."),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_scoped_client_cannot_read_state_through_a_planted_link(world: World, name: str) -> None:
    need_bwrap()
    seen = run_against_a_token_server(
        world, [{"text": "noted"}], lambda url, fake: _attack(url, world, fake, ATTACKS[name])
    )
    text = json.dumps(seen)
    assert CANARY_SECRET not in text, f"canary leaked: {text[-3000:]}"
    assert "hard link" in text, text[-3000:]
    assert json.loads(_keys(world)) == {"api_key": CANARY_SECRET}


async def _attack(url: str, world: World, fake: FakeProvider, call: dict[str, Any]) -> list[Any]:
    home = world.tether_home
    agent, b_messages = await canary_in_conversation_b(url, world)
    store = LocalStore(home)
    assert CANARY_SECRET in b_messages.read_text()
    # the hostile repository (or a process before this run) left two names in the workspace
    _plant(world, home / KEYS, "k.json")
    _plant(world, b_messages, "b.jsonl")
    conversation_a = store.create_conversation(agent).id
    fake.set_script([{"tool_calls": [call]}, {"text": "done"}])
    client = await scoped_turn(url, world, agent, conversation_a)
    assert len(client.deltas("tool_return_message")) == 1, client.seen
    return client.seen


def test_apply_patch_never_goes_through_a_link_into_state(world: World) -> None:
    """The codex toolset's apply_patch reads and rewrites through the same file access."""
    _plant(world, world.tether_home / KEYS)
    before = _keys(world)
    # a context that does not match: a tool that read the file might quote it in its error
    edit = "*** Begin Patch\n*** Update File: notes-copy.txt\n@@\n-api\n+x\n*** End Patch"
    out = attempt(world, tool("apply_patch", input=edit),
                  args=["--toolset", "codex_snake", "--yolo"], env={"TETHER_FS_SANDBOX": "0"})
    assert out.results and not out.leaked, out.explain()
    assert _keys(world) == before, out.explain()
    assert (world.project / "notes-copy.txt").read_text() == before, out.explain()
    assert "hard link" in out.outputs[0], out.explain()
