"""Secrets over protocol v2 (`secret_list`, `secret_apply`): a batch applied as
(current ∪ set) ∖ unset with upper-case names, kept in $TETHER_HOME/secrets.json (0600), listed
with values for the server's operator only; a scoped token — even for the agent — gets neither
values nor names, and the answer for a granted agent equals the one for a made-up id."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import orjson
import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.testing.fake_provider import FakeProvider


def test_secrets_are_kept_private_and_listed_to_the_operator_only(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                a = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                first = await ask(c, "secret_apply", agent_id=a,
                                  set={"github_token": "ghp-one", "API_KEY": "k1"}, unset=[])
                assert first["success"] and first["names"] == ["API_KEY", "GITHUB_TOKEN"], first
                assert "ghp-one" not in str(first)
                second = await ask(c, "secret_apply", agent_id=a, set={"API_KEY": "k2"},
                                   unset=["github_token"])
                assert second["names"] == ["API_KEY"]
                listed = await ask(c, "secret_list", agent_id=a)
                assert listed["secrets"] == [{"key": "API_KEY", "value": "k2"}], listed
                path = tether_home / "secrets.json"
                assert stat.S_IMODE(path.stat().st_mode) == 0o600
                assert orjson.loads(path.read_bytes()) == {a: {"API_KEY": "k2"}}
                bad = await ask(c, "secret_apply", agent_id=a, set={"1BAD": "x"}, unset=[])
                assert bad["success"] is False and "1BAD" in bad["error"] and bad["names"] == []
                made_up = "agent-local-33333333-3333-3333-3333-333333333333"
                none = await ask(c, "secret_list", agent_id=made_up)
                assert none["success"] is False and none["secrets"] == []

                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    for kind, extra in (("secret_list", {}),
                                        ("secret_apply", {"set": {"X": "y"}, "unset": []})):
                        mine = await ask(s, kind, agent_id=a, **extra)
                        other = await ask(s, kind, agent_id=made_up, **extra)
                        assert mine["success"] is False and "unscoped" in mine["error"], mine
                        assert "k2" not in str(mine) and "API_KEY" not in str(mine)
                        assert same_answer(mine, other, (a, made_up))
                assert orjson.loads(path.read_bytes()) == {a: {"API_KEY": "k2"}}

                gone = await ask(c, "agent_delete", agent_id=a)
                assert gone["success"], gone
                assert orjson.loads(path.read_bytes()) == {}

        asyncio.run(scenario())
