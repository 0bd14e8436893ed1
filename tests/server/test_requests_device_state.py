"""`change_device_state` with the reference's fields (`mode`, `cwd`, `agent_id`,
`conversation_id`) inside `payload` or at top level: each applied, the runtime named by
`runtime` or by agent_id + conversation_id, contradictions refused with the field named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.support import Client, InProcess, point_at
from tether.testing.fake_provider import FakeProvider


def test_device_state_fields_at_top_level_or_in_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                agent, conv = runtime["agent_id"], runtime["conversation_id"]

                async def status_after(frame: dict[str, object]) -> dict[str, object]:
                    await c.send({"type": "change_device_state", **frame})
                    assert (await c.of_type("change_device_state_response",
                                            request_id=frame["request_id"]))["success"]
                    # The state frame goes out before the response (the runtime is idle).
                    last = [f for f in c.seen if f["type"] == "update_device_status"][-1]
                    return dict(last["device_status"])

                # Top level, the runtime named by agent_id + conversation_id (no `runtime`).
                status = await status_after({"request_id": "t", "agent_id": agent,
                                             "conversation_id": conv, "mode": "acceptEdits",
                                             "cwd": str(other)})
                assert status["current_permission_mode"] == "acceptEdits"
                assert status["current_working_directory"] == str(other)
                # Inside payload, as the reference sends it.
                status = await status_after({"request_id": "p", "runtime": runtime, "payload": {
                    "mode": "default", "cwd": str(project), "agent_id": agent,
                    "conversation_id": conv}})
                assert status["current_permission_mode"] == "default"
                assert status["current_working_directory"] == str(project)

                for frame, field in (
                    ({"runtime": runtime, "mode": "plan", "payload": {"mode": "default"}}, "mode"),
                    ({"runtime": runtime, "payload": {"agent_id": "agent-other"}},
                     "payload.agent_id"),
                    ({"payload": {"mode": "default"}}, "runtime"),
                    ({"payload": {"conversation_id": conv}}, "payload.agent_id"),
                ):
                    await c.send({"type": "change_device_state", "request_id": "bad", **frame})
                    error = await c.of_type("error", request_id="bad")
                    assert f"'{field}'" in error["message"], (frame, error)

        asyncio.run(scenario())
