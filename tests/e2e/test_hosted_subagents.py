"""The cloud backend's open ends (issue 24) against the real Letta server: a subagent of a cloud
run is a cloud run on the same server (its agent, tagged with its parent, lives there, its model
calls go through the server, its client tool runs here), and `tether agents list` on the cloud
backend lists the server's agents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.api.hosted import MODEL, Hosted, hosted_server
from tests.e2e.support import run_tether

SUBAGENT_PROMPT = "You are a subagent working on one delegated task"


@pytest.fixture(scope="module")
def letta() -> Iterator[Hosted]:
    yield from hosted_server()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def _server_agents(letta: Hosted) -> list[dict[str, Any]]:
    return list(letta.api("GET", "/v1/agents/?limit=1000"))


def test_a_subagent_of_a_cloud_run_runs_on_the_same_server(letta: Hosted, project: Path) -> None:
    before = {a["id"] for a in _server_agents(letta)}
    asked = len(letta.model_requests())
    letta.script([
        {"tool_calls": [{"name": "Agent", "id": "call_agent1", "arguments": {
            "description": "delegate", "prompt": "make the file", "subagent_type": "general-purpose",
            "run_in_background": False}}]},
        {"tool_calls": [{"name": "Bash", "id": "call_child1", "arguments": {
            "command": "touch made-by-child.txt", "description": "make a file"}}]},
        {"text": "child made it"},
        {"text": "all done"},
    ])
    run = letta.run(["-p", "delegate it", "-m", MODEL, "--output-format", "stream-json",
                     "--allowedTools", "Agent"], project, timeout=240)
    assert run.code == 0, run.stderr
    parent_id = run.of_type("system")[0]["agent_id"]
    assert run.of_type("result")[-1]["result"] == "all done"
    agent_return = next(r for r in run.of_type("message", "tool_return_message")
                        if r["tool_call_id"] == "call_agent1")
    assert agent_return["status"] == "success" and "child made it" in agent_return["tool_return"]
    assert (project / "made-by-child.txt").exists()  # the child's client tool ran here

    new = [a for a in _server_agents(letta) if a["id"] not in before]
    children = [a for a in new if f"parent:{parent_id}" in (a.get("tags") or [])]
    assert len(children) == 1, new
    assert "type:general-purpose" in children[0]["tags"]
    # the child's model calls went through the server: its system prompt is in them
    requests = letta.model_requests()[asked:]
    assert len(requests) == 4
    child_systems = [json.dumps(r["body"]["messages"][0]) for r in requests[1:3]]
    assert all(SUBAGENT_PROMPT in s for s in child_systems)
    assert SUBAGENT_PROMPT not in json.dumps(requests[0]["body"]["messages"][0])
    assert letta.violations() == []


def _listed(letta: Hosted, project: Path, *args: str, **env: str) -> list[dict[str, Any]]:
    run = run_tether(["agents", "list", "--limit", "1000", *args], env=letta.env(**env), cwd=project)
    assert run.code == 0, run.stderr
    return list(json.loads(run.stdout))


def test_agents_list_on_the_cloud_backend_lists_the_servers_agents(letta: Hosted, project: Path) -> None:
    made = letta.api("POST", "/v1/agents/", {"name": "made-elsewhere", "model": MODEL,
                                              "embedding": "openai/text-embedding-3-small"})
    server_ids = {a["id"] for a in _server_agents(letta)}
    listed = _listed(letta, project, "--backend", "cloud")
    assert {a["id"] for a in listed} == server_ids and made["id"] in server_ids
    row = next(a for a in listed if a["id"] == made["id"])
    assert row["name"] == "made-elsewhere" and row["model"] == MODEL
    # TETHER_BACKEND (what a parent hands its children) chooses it as well; --name filters
    by_env = _listed(letta, project, "--name", "made-elsewhere", TETHER_BACKEND="cloud")
    assert [a["id"] for a in by_env] == [made["id"]]
    # the local backend lists only this machine's records: the server-only agent is not there
    assert made["id"] not in {a["id"] for a in _listed(letta, project, "--backend", "local")}


def test_agents_list_names_an_unreachable_server(project: Path) -> None:
    env = Hosted("http://127.0.0.1:9", "http://127.0.0.1:9").env()
    run = run_tether(["agents", "list", "--backend", "cloud"], env=env, cwd=project)
    assert run.code == 1 and "http://127.0.0.1:9" in run.stderr and run.stdout == ""
