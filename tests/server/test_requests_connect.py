"""Provider connections over protocol v2 (`connect_provider`, `disconnect_provider`): the key
stored in $TETHER_HOME's credential file (0600) exactly as `tether connect` stores it and never
in an answer, a custom OpenAI-compatible server by its base URL, a bad field named, and both
refused to a scoped token with nothing written."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.providers.credentials import auth_path, find_credential, load_credentials
from tether.testing.fake_provider import FakeProvider

KEY = "sk-groq-secret-456"


def test_providers_are_connected_and_disconnected_by_the_operator(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    for kind, fields in (("connect_provider", {"fields": {"api_key": KEY}}),
                                         ("disconnect_provider", {})):
                        refused = await ask(s, kind, target="local", provider_id="groq",
                                            **fields)
                        assert refused["success"] is False and "scoped" in refused["error"]
                        assert refused["providers"] == []
                assert find_credential(load_credentials(tether_home), "groq") is None

                done = await ask(c, "connect_provider", target="local", provider_id="groq",
                                 fields={"api_key": KEY})
                assert done["success"] and done["models_may_have_changed"] is True, done
                assert KEY not in json.dumps(done)
                rows = {p["id"]: p for p in done["providers"]}
                assert rows["groq"]["connected"]["is_connected"] is True
                record = find_credential(load_credentials(tether_home), "groq")
                assert record is not None and record["auth"]["key"] == KEY
                assert stat.S_IMODE(auth_path(tether_home).stat().st_mode) == 0o600

                custom = await ask(c, "connect_provider", target="local", provider_id="mylab",
                                   fields={"base_url": fake.url})
                assert custom["success"], custom
                assert {p["id"] for p in custom["providers"]} >= {"groq", "mylab"}
                nourl = await ask(c, "connect_provider", target="local", provider_id="other",
                                  fields={})
                assert nourl["success"] is False and "base-url" in nourl["error"]
                odd = await ask(c, "connect_provider", target="local", provider_id="groq",
                                fields={"password": "x"})
                assert odd["success"] is False and "fields.password" in odd["error"]

                gone = await ask(c, "disconnect_provider", target="local", provider_id="groq")
                assert gone["success"], gone
                rows = {p["id"]: p for p in gone["providers"]}
                assert rows["groq"]["connected"]["is_connected"] is False
                assert find_credential(load_credentials(tether_home), "groq") is None
                again = await ask(c, "disconnect_provider", target="local", provider_id="groq")
                assert again["success"] is False and "no stored credentials" in again["error"]
                named = await ask(c, "disconnect_provider", target="local",
                                  provider_id="openai-compatible", provider_name="mylab")
                assert named["success"] and "mylab" not in {p["id"] for p in named["providers"]}

        asyncio.run(scenario())
