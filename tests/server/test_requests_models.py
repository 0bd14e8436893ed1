"""Models and providers over protocol v2 (`list_models`, `list_connect_providers`): the catalog
with the configured default marked, the handles a configured provider lists (the fake provider
on loopback), each provider's connection state without any key, and the provider list refused
to a scoped token."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.server.requests_client import POLICY, ask, token
from tests.server.support import Client, InProcess, point_at
from tether.backends.local.store import LocalStore
from tether.providers.credentials import save_credential
from tether.testing.fake_provider import FakeProvider


def test_models_and_providers_are_listed_without_secrets(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([], models=["claude-test", "claude-other"]) as fake:
        point_at(fake, monkeypatch)
        save_credential(tether_home, "openai", api_key="sk-stored-secret-123",
                        base_url=fake.url, timeout=None)  # asked on loopback too

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
            ):
                c = Client(ws)
                models = await ask(c, "list_models")
                assert models["success"], models
                default = [e for e in models["entries"] if e["isDefault"]]
                assert [e["handle"].split("/")[0] for e in default] == ["anthropic"]
                assert {"anthropic/claude-test", "anthropic/claude-other"} <= set(
                    models["available_handles"])

                providers = await ask(c, "list_connect_providers", target="local")
                rows = {p["id"]: p for p in providers["providers"]}
                assert rows["anthropic"]["connected"]["is_connected"]
                assert rows["anthropic"]["connected"]["base_url"] == fake.url
                assert rows["openai"]["connected"]["is_connected"]
                assert not rows["groq"]["connected"]["is_connected"]
                text = json.dumps(providers) + json.dumps(models)
                assert "sk-stored-secret-123" not in text and "sk-test" not in text
                bad = await ask(c, "list_connect_providers", target="cloud")
                assert bad["success"] is False and "target" in bad["error"]

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    assert (await ask(s, "list_models"))["success"]
                    refused = await ask(s, "list_connect_providers", target="local")
                    assert refused["success"] is False and "scoped" in refused["error"]
                    assert refused["providers"] == []

        asyncio.run(scenario())


def test_update_model_switches_the_agents_next_turns(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "first", request_id="m1")
                await c.of_type("turn_finished", request_id="m1")
                done = await ask(c, "update_model", runtime=runtime,
                                 payload={"model_handle": "anthropic/claude-other"})
                assert done["success"] and done["applied_to"] == "agent", done
                assert done["model_handle"] == "anthropic/claude-other"
                agent = LocalStore(tether_home).get_agent(runtime["agent_id"])
                assert agent.model == "anthropic/claude-other"
                bad = await ask(c, "update_model", runtime=runtime,
                                payload={"model_handle": "nowhere/x"})
                assert bad["success"] is False
                await c.say(runtime, "second", request_id="m2")
                await c.of_type("turn_finished", request_id="m2")
                models = [r["body"]["model"] for r in fake.requests]
                assert models == ["claude-test", "claude-other"], models

        asyncio.run(scenario())
