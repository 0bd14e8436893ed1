"""`execute_command` over protocol v2: `/compact` and `/reload` run on a runtime this connection
started, answered by `command_start` / `command_end` stream deltas (the compaction's summary
from the provider, on disk in the conversation), an unknown id ending with success false, the
ids advertised in `update_device_status`, and nothing run for a connection that did not start
the runtime."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


async def command(c: Client, runtime: dict[str, str], command_id: str, rid: str) -> dict:
    await c.send({"type": "execute_command", "request_id": rid, "runtime": runtime,
                  "command_id": command_id})
    start = await c.wait_for(lambda f: f.get("type") == "stream_delta"
                             and f["delta"].get("id") == f"command-start-{rid}")
    assert start["delta"]["input"] == f"/{command_id}"
    end = await c.wait_for(lambda f: f.get("type") == "stream_delta"
                           and f["delta"].get("id") == f"command-end-{rid}")
    assert end["runtime"] == runtime and end["event_seq"] > start["event_seq"]
    return end["delta"]


def test_slash_commands_run_on_a_started_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [{"text": "one"}, {"text": "two"}, {"text": "A short summary."}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                runtime = (await c.start(project))["runtime"]
                status = await c.of_type("update_device_status")
                assert status["device_status"]["supported_commands"] == ["compact", "reload"]
                for n, text in enumerate(("hi", "hi again")):
                    await c.say(runtime, text, request_id=f"t{n}")
                    await c.of_type("turn_finished", request_id=f"t{n}")

                done = await command(c, runtime, "compact", "cmd-1")
                assert done["success"] is True and "A short summary." in done["output"], done
                assert done["command_id"] == "compact"
                assert len(fake.requests) == 3  # the summary call went to the provider
                unknown = await command(c, runtime, "upgrade", "cmd-2")
                assert unknown["success"] is False and "Unknown command" in unknown["output"]
                reloaded = await command(c, runtime, "reload", "cmd-3")
                assert reloaded["success"] is True, reloaded

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    await s.send({"type": "execute_command", "request_id": "cmd-4",
                                  "runtime": runtime, "command_id": "compact"})
                    refused = await s.of_type("error", request_id="cmd-4")
                    assert "not started on this connection" in refused["message"]
                    assert not any(f.get("type") == "stream_delta" for f in s.seen)
                assert len(fake.requests) == 3

        asyncio.run(scenario())
