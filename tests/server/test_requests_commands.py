"""`execute_command` over protocol v2: the reference's command ids tether runs (`/clear`,
`/compact`, `/reload`, `/remember`, `/toolset`) on a runtime this connection started, told by
`slash_command_start` / `slash_command_end` stream deltas and answered by
`execute_command_response` (the compaction's summary from the provider, a fresh conversation on
disk for /clear, /remember's turn reaching the provider, /toolset's tools in the next request),
an id tether has nothing behind ending with success false, the ids advertised in
`update_device_status`, and nothing run for a connection that did not start the runtime."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider


async def command(
    c: Client, runtime: dict[str, str], command_id: str, rid: str, args: str = ""
) -> dict:
    answer = await ask(c, "execute_command", runtime=runtime, command_id=command_id, args=args)
    start = next(f for f in c.seen if f.get("type") == "stream_delta"
                 and f["delta"].get("message_type") == "slash_command_start"
                 and f["delta"]["input"].startswith(f"/{command_id}")
                 and f["delta"]["id"] not in _used)
    end = next(f for f in c.seen if f.get("type") == "stream_delta"
               and f["delta"].get("message_type") == "slash_command_end"
               and f["delta"]["id"] not in _used)
    _used.update({start["delta"]["id"], end["delta"]["id"]})
    assert start["delta"]["input"] == f"/{command_id}{' ' + args if args else ''}"
    assert end["runtime"] == runtime and end["event_seq"] > start["event_seq"]
    assert answer["success"] == end["delta"]["success"]
    assert answer["output"] == end["delta"]["output"]
    return end["delta"]


_used: set[str] = set()


def test_slash_commands_run_on_a_started_runtime(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [{"text": "one"}, {"text": "two"}, {"text": "A short summary."},
              {"text": "Stored it."}, {"text": "three"}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                runtime = (await c.start(project))["runtime"]
                # No reflection pass in the background of these turns (its own test's job).
                off = await ask(c, "set_reflection_settings", runtime=runtime,
                                settings={"trigger": "off", "step_count": 1})
                assert off["success"], off
                status = next(f for f in c.seen if f.get("type") == "update_device_status")
                assert status["device_status"]["supported_commands"] == [
                    "clear", "compact", "reload", "remember", "toolset"]
                for n, text in enumerate(("hi", "hi again")):
                    await c.say(runtime, text, request_id=f"t{n}")
                    await c.of_type("turn_finished", request_id=f"t{n}")

                done = await command(c, runtime, "compact", "cmd-1")
                assert done["success"] is True and "A short summary." in done["output"], done
                assert done["command_id"] == "compact"
                assert len(fake.requests) == 3  # the summary call went to the provider
                unknown = await command(c, runtime, "doctor", "cmd-2")
                assert unknown["success"] is False and "Unknown command" in unknown["output"]
                reloaded = await command(c, runtime, "reload", "cmd-3")
                assert reloaded["success"] is True, reloaded

                remembered = await command(c, runtime, "remember", "cmd-4", "use tabs")
                assert remembered["success"] is True, remembered
                await c.of_type("turn_finished")
                sent = str(fake.requests[3]["body"])
                assert "/remember" in sent and "use tabs" in sent

                shown = await command(c, runtime, "toolset", "cmd-5")
                assert shown["success"] and "preference auto" in shown["output"], shown
                switched = await command(c, runtime, "toolset", "cmd-6", "codex")
                assert switched["success"] and "codex" in switched["output"], switched
                bad = await command(c, runtime, "toolset", "cmd-7", "nope")
                assert bad["success"] is False and "toolset_preference" in bad["output"]
                await c.say(runtime, "go on", request_id="t2")
                await c.of_type("turn_finished", request_id="t2")
                tools = {t["name"] for t in fake.requests[4]["body"]["tools"]}
                assert "exec_command" in tools and "Bash" not in tools, tools

                before = {r.id for r in LocalStore(tether_home).list_conversations(
                    runtime["agent_id"])}
                cleared = await command(c, runtime, "clear", "cmd-8")
                assert cleared["success"] is True, cleared
                after = {r.id for r in LocalStore(tether_home).list_conversations(
                    runtime["agent_id"])}
                (fresh,) = after - before
                assert fresh in cleared["output"] and runtime["conversation_id"] in after

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    refused = await ask(s, "execute_command", runtime=runtime,
                                        command_id="compact")
                    assert refused["success"] is False
                    assert "not started on this connection" in refused["error"]
                    assert not any(f.get("type") == "stream_delta" for f in s.seen)
                assert len(fake.requests) == 5

        asyncio.run(scenario())
