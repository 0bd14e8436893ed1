"""The reference's requests tether has nothing behind (`chatgpt_usage_read`, `get_experiments`,
`set_experiment`): each gets its `_response` in the reference's shape with `success: false` and
an error saying why (for `chatgpt_usage_read` the reference's `{code, message}` object), a bad
field is still named, and `/app-server-info` says their capabilities are false."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client


def test_unsupported_requests_say_so_and_their_capabilities_are_false(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()

    async def scenario() -> None:
        async with admin_client(project) as (srv, c):
            info = await ask(c, "app_server_info")
            assert info["capabilities"]["chatgpt_usage"] is False
            assert info["capabilities"]["experiments"] is False
            usage = await ask(c, "chatgpt_usage_read", target="local", force_refresh=True)
            assert usage["success"] is False and usage["target"] == "local"
            assert usage["error"]["code"] == "not_connected"
            assert "ChatGPT" in usage["error"]["message"] and "usage" not in usage
            listed = await ask(c, "get_experiments")
            assert listed == {**listed, "success": False, "experiments": []}
            assert "no experiments" in listed["error"]
            changed = await ask(c, "set_experiment", experiment_id="diffs", enabled=True)
            assert changed["success"] is False and "no experiments" in changed["error"]
            bad = await ask(c, "set_experiment", experiment_id="diffs", enabled="yes")
            assert bad["success"] is False and "enabled" in bad["error"]
            bad = await ask(c, "chatgpt_usage_read", target="cloud")
            assert bad["success"] is False and "target" in bad["error"]
            async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws:
                scoped = Client(ws)
                usage = await ask(scoped, "chatgpt_usage_read", target="local")
                assert usage["success"] is False and usage["error"]["code"] == "not_connected"

    asyncio.run(scenario())
