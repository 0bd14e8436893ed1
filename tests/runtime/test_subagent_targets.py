"""End to end: the Agent (Task) tool's `agent_id` / `conversation_id` run the child as an
existing agent the parent may reach, and refuse any other target clearly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import Run, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def agent_call(kind: str = "general-purpose", **target: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "Agent", "arguments": {
        "description": "delegate", "prompt": "do the thing", "subagent_type": kind,
        "run_in_background": False, **target}}]}


def run(workdir: Path, script: list[dict[str, Any]], *extra: str) -> Run:
    with FakeProvider(script) as fake:
        done = run_tether(["-p", "go", "--model", MODEL, "--yolo", "--output-format", "stream-json",
                           *extra], env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        assert fake.violations == []
    assert done.code == 0, done.stderr
    return done


def returns(done: Run) -> list[dict[str, Any]]:
    return done.of_type("message", "tool_return_message")


def cli_json(workdir: Path, *args: str) -> Any:
    done = run_tether(list(args), env=dict(os.environ), cwd=workdir)
    assert done.code == 0, done.stderr
    return json.loads(done.stdout)


def test_agent_id_and_conversation_id_run_the_existing_agent(workdir: Path, tether_home: Path) -> None:
    parent = run(workdir, [{"text": "hi"}]).events[-1]["agent_id"]
    helper = cli_json(workdir, "agents", "create", "--name", "helper", "--tags", f"parent:{parent}")["id"]
    done = run(workdir, [agent_call(agent_id=helper), {"text": "helper here"}, {"text": "ok"}],
               "--agent", parent)
    ret = returns(done)[0]
    assert ret["status"] == "success", ret
    head = ret["tool_return"].splitlines()[0]
    assert f"agent_id={helper}," in head and head.endswith("status=completed")
    conversation = head.split("conversation_id=")[1].split(",")[0]
    assert conversation.startswith("local-conv-")
    # no new agent was made, and the helper's new conversation holds the child's turn
    assert len(cli_json(workdir, "agents", "list")) == 2
    first = cli_json(workdir, "messages", "transcript", "--conversation", conversation)
    assert first["agent_id"] == helper and first["transcript"].endswith("assistant: helper here")
    # conversation_id continues that same conversation
    done = run(workdir, [agent_call(conversation_id=conversation), {"text": "again"}, {"text": "ok"}],
               "--agent", parent)
    assert f"conversation_id={conversation}," in returns(done)[0]["tool_return"]
    again = cli_json(workdir, "messages", "transcript", "--conversation", conversation)
    assert again["message_count"] == first["message_count"] + 2


def test_targets_outside_the_grant_are_refused(workdir: Path, tether_home: Path) -> None:
    first = run(workdir, [{"text": "hi"}]).events[-1]
    parent, own = first["agent_id"], first["conversation_id"]
    stranger = cli_json(workdir, "agents", "create", "--name", "stranger")["id"]
    mine = cli_json(workdir, "agents", "create", "--tags", f"parent:{parent}")["id"]
    done = run(workdir, [
        agent_call(agent_id=stranger),
        agent_call(agent_id="agent-local-does-not-exist"),
        agent_call(conversation_id=own),
        agent_call("recall", agent_id=mine),
        agent_call(conversation_id="default"),
        {"text": "refused all"},
    ], "--conversation", own)
    texts = [r["tool_return"] for r in returns(done)]
    assert all(r["status"] == "error" for r in returns(done)), texts
    reach = "is not one this agent may reach"
    assert reach in texts[0] and reach in texts[1]
    assert texts[0].replace(stranger, "X") == texts[1].replace("agent-local-does-not-exist", "X")
    assert "own conversation, which is mid-turn" in texts[2]
    assert "only subagent_type general-purpose" in texts[3]
    assert "give agent_id too" in texts[4]
    assert len(cli_json(workdir, "agents", "list")) == 3  # no child agent was made
