"""Reflection settings over protocol v2 (`get_reflection_settings`, `set_reflection_settings`):
the agent's trigger and step count saved where a run reads them
($TETHER_HOME/agents/<id>/reflection.json), per-project scopes refused rather than half done,
and a scoped token answered for another agent's runtime as for a made-up one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import POLICY, ask, same_answer, token
from tests.server.support import MODEL, Client, InProcess, point_at
from tether.backends.local.store import LocalStore
from tether.runtime.agents.reflection import load_state
from tether.testing.fake_provider import FakeProvider


def test_reflection_settings_are_read_and_saved_per_agent(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
            ):
                c = Client(ws)
                a, b = [(await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                        for _ in "ab"]
                ra = {"agent_id": a, "conversation_id": "default"}
                rb = {"agent_id": b, "conversation_id": "default"}
                got = await ask(c, "get_reflection_settings", runtime=ra)
                assert got["reflection_settings"] == {
                    "agent_id": a, "trigger": "compaction-event", "step_count": 25}
                done = await ask(c, "set_reflection_settings", runtime=ra,
                                 settings={"trigger": "step-count", "step_count": 5})
                assert done["success"] and done["scope"] == "global", done
                state = load_state(LocalStore(tether_home), a)
                assert (state.trigger, state.step_count) == ("step-count", 5)
                for bad in ({"settings": {"trigger": "sometimes", "step_count": 5}},
                            {"settings": {"trigger": "off", "step_count": 0}},
                            {"settings": {"trigger": "off", "step_count": 1},
                             "scope": "local_project"}):
                    no = await ask(c, "set_reflection_settings", runtime=ra, **bad)
                    assert no["success"] is False and no["reflection_settings"] is None, no
                assert load_state(LocalStore(tether_home), a).trigger == "step-count"

                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    assert (await ask(s, "get_reflection_settings", runtime=ra))["success"]
                    guess = "agent-local-55555555-5555-5555-5555-555555555555"
                    for kind, extra in (("get_reflection_settings", {}),
                                        ("set_reflection_settings",
                                         {"settings": {"trigger": "off", "step_count": 1}})):
                        hidden = await ask(s, kind, runtime=rb, **extra)
                        absent = await ask(s, kind, runtime={**rb, "agent_id": guess}, **extra)
                        assert hidden["success"] is False
                        assert same_answer(hidden, absent, (b, guess)), (hidden, absent)
                    assert load_state(LocalStore(tether_home), b).trigger == "compaction-event"

        asyncio.run(scenario())


def test_device_status_shows_the_agents_toolset_memory_and_reflection(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                agent = runtime["agent_id"]
                status = (await c.of_type("update_device_status"))["device_status"]
                assert status["current_toolset"] == "default"  # auto, for an Anthropic model
                assert status["current_toolset_preference"] == "auto"
                assert status["reflection_settings"] == {
                    "agent_id": agent, "trigger": "compaction-event", "step_count": 25}
                await ask(c, "set_reflection_settings", runtime=runtime,
                          settings={"trigger": "off", "step_count": 3})
                changed = [f for f in c.seen if f.get("type") == "update_device_status"][-1]
                assert changed["device_status"]["reflection_settings"]["trigger"] == "off"

        asyncio.run(scenario())
