"""A secret set by `secret_apply` reaches the environment of the agent's next tool call, through
the real `tether server`: a runtime started before the secret was set runs a Bash call that
writes `$DEPLOY_WORD` to a file (on disk: the value) and echoes it (what the model is sent: the
value scrubbed), as the reference gives its shell tools the secrets a command names. A secret
removed with `unset` is gone from the call after it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from websockets.asyncio.client import connect

from tests.server.requests_client import ask
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.testing.fake_provider import FakeProvider

VALUE = "correct-horse-battery-staple"
COMMAND = 'printf %s "$DEPLOY_WORD" > word.txt; echo "word: $DEPLOY_WORD"'


def test_secret_apply_reaches_the_next_bash_call(tmp_path: Path) -> None:
    home, project = tmp_path / "home-t", tmp_path / "project"
    project.mkdir()
    (tmp_path / "home").mkdir(exist_ok=True)
    script = [{"tool_calls": [bash(COMMAND)]}, {"text": "done"},
              {"tool_calls": [bash(COMMAND)]}, {"text": "done again"}]
    with FakeProvider(script) as fake:
        server = ServerProcess(server_env(fake.url, home, tmp_path), project,
                               "--cwd", str(project))
        try:
            asyncio.run(_scenario(server.url, project))
        finally:
            assert server.stop() == 0
        first_result = json.dumps(fake.requests[1]["body"])
        assert VALUE not in first_result and "[redacted]" in first_result
        assert fake.violations == []
    assert (project / "word.txt").read_text() == ""  # after unset: an empty variable


async def _scenario(url: str, project: Path) -> None:
    async with connect(url, open_timeout=10) as ws:
        c = Client(ws)
        runtime = (await c.start(project))["runtime"]
        applied = await ask(c, "secret_apply", agent_id=runtime["agent_id"],
                            set={"deploy_word": VALUE})
        assert applied["success"] and applied["names"] == ["DEPLOY_WORD"], applied

        await c.say(runtime, "use the secret", request_id="t1")
        request = await c.of_type("control_request")
        await c.answer(runtime, request["request_id"])
        assert (await c.of_type("turn_finished", request_id="t1"))["stop_reason"] == "end_turn"
        assert (project / "word.txt").read_text() == VALUE

        gone = await ask(c, "secret_apply", agent_id=runtime["agent_id"],
                         unset=["DEPLOY_WORD"])
        assert gone["success"] and gone["names"] == []
        await c.say(runtime, "again", request_id="t2")
        request = await c.of_type("control_request")
        await c.answer(runtime, request["request_id"])
        assert (await c.of_type("turn_finished", request_id="t2"))["stop_reason"] == "end_turn"
