"""Skills over protocol v2 (`skill_enable`, `skill_disable`, `skill_list`): a global skill
installed under $TETHER_HOME/skills and removed again, an agent's skill as one commit in its
memory, `skills_updated` to the clients, and a scoped token that may not install anything and
cannot reach another agent's skills."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import POLICY, ask, same_answer, token
from tests.server.support import MODEL, Client, InProcess, point_at
from tether.memory.memfs import MemFS, memory_dir
from tether.testing.fake_provider import FakeProvider

SKILL = "---\nname: greet\ndescription: say hello nicely\n---\nSay hello.\n"


def test_skills_are_installed_listed_and_removed(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    source = tmp_path / "src" / "greeting"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(SKILL)
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
                srv.connect(additional_headers=token()) as ws2,
            ):
                c, watcher = Client(ws), Client(ws2)
                on = await ask(c, "skill_enable", skill_path=str(source))
                assert on["success"] and on["skill_name"] == "greet", on
                assert (tether_home / "skills" / "greet" / "SKILL.md").read_text() == SKILL
                assert (await watcher.of_type("skills_updated"))["skill_name"] == "greet"
                names = [s["name"] for s in (await ask(c, "skill_list"))["skills"]]
                assert "greet" in names
                again = await ask(c, "skill_enable", skill_path=str(source))
                assert again["success"] is False and "already exists" in again["error"]
                off = await ask(c, "skill_disable", name="greet")
                assert off["success"] and not (tether_home / "skills" / "greet").exists()
                missing = await ask(c, "skill_disable", name="greet")
                assert missing["success"] is False and missing["skill_name"] == "greet"

                agent = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                mine = await ask(c, "skill_enable", skill_path=str(source), agent_id=agent)
                assert mine["success"], mine
                memfs = MemFS(memory_dir(tether_home, agent), agent_id=agent)
                assert memfs.read_head("skills/greet/SKILL.md") == SKILL
                assert memfs.log(1)[0].subject.startswith("skills: install greet")
                listed = await ask(c, "skill_list", agent_id=agent)
                assert any(s["name"] == "greet" and s["source"] == "agent"
                           for s in listed["skills"])

                other = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                async with srv.connect(additional_headers=token(agents=[other])) as ws3:
                    s = Client(ws3)
                    refused = await ask(s, "skill_enable", skill_path=str(source),
                                        agent_id=other)
                    assert refused["success"] is False and "scoped" in refused["error"]
                    refused = await ask(s, "skill_disable", name="greet")
                    assert refused["success"] is False and "scoped" in refused["error"]
                    guess = "agent-local-22222222-2222-2222-2222-222222222222"
                    hidden = await ask(s, "skill_disable", name="greet", agent_id=agent)
                    absent = await ask(s, "skill_disable", name="greet", agent_id=guess)
                    assert hidden["success"] is False
                    assert same_answer(hidden, absent, (agent, guess)), (hidden, absent)
                assert MemFS(memory_dir(tether_home, agent), agent_id=agent).read_head(
                    "skills/greet/SKILL.md") == SKILL

        asyncio.run(scenario())
