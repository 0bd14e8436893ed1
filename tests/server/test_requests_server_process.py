"""The request families through the real `tether server` command: `/app-server-info`'s
capabilities true exactly for the families answered (each of their requests gets its
`_response`; a false one's requests are unknown frames, or answered with success false where
tether has nothing behind them), and a client managing an agent whose
records, memory commit and schedule land on disk under TETHER_HOME."""

from __future__ import annotations

import asyncio
from pathlib import Path

from websockets.asyncio.client import connect

from tests.server.requests_client import ask
from tests.server.support import MODEL, Client, ServerProcess, server_env
from tether.backends.local.store import LocalStore
from tether.memory.memfs import MemFS, memory_dir
from tether.server.requests import CAPABILITIES, REQUESTS
from tether.testing.fake_provider import FakeProvider


def test_capabilities_and_requests_over_the_real_server(tmp_path: Path) -> None:
    home, project = tmp_path / "home-t", tmp_path / "project"
    project.mkdir()
    (tmp_path / "home").mkdir(exist_ok=True)
    with FakeProvider([]) as fake:
        env = server_env(fake.url, home, tmp_path)
        env["TETHER_CRON"] = "0"
        server = ServerProcess(env, project, "--cwd", str(project))
        try:
            asyncio.run(_scenario(server.url, home, project))
        finally:
            assert server.stop() == 0


async def _scenario(url: str, home: Path, project: Path) -> None:
    async with connect(url, open_timeout=10) as ws:
        c = Client(ws)
        info = await ask(c, "app_server_info")
        caps = info["capabilities"]
        assert caps["agent_management"] and caps["memory_management"], caps
        for name, kinds in CAPABILITIES.items():
            for kind in kinds:
                await c.send({"type": kind, "request_id": f"probe-{kind}"})
                answer = await c.wait_for(lambda f, k=kind: f.get("request_id") == f"probe-{k}")
                if caps[name] and not REQUESTS[kind].answered:  # no _response: a field named
                    assert answer["type"] == "error" and "is required" in answer["message"]
                elif caps[name]:
                    assert answer["type"] == f"{kind}_response", answer
                elif kind in REQUESTS:  # answered only to say tether has nothing behind it
                    assert not REQUESTS[kind].supported
                    assert answer["type"] in (f"{kind}_response", "error"), answer
                    assert answer.get("success") is not True, answer
                else:
                    assert answer["type"] == "error" and "unknown frame type" in answer["message"]
        assert set(info["requests"]) >= {k for n, ks in CAPABILITIES.items() if caps[n] for k in ks}

        agent = (await ask(c, "agent_create", body={"model": MODEL, "name": "ops"}))["agent"]
        assert LocalStore(home).get_agent(agent["id"]).name == "ops"
        wrote = await ask(c, "write_memory_file", agent_id=agent["id"], path="notes.md",
                          content="on disk")
        memfs = MemFS(memory_dir(home, agent["id"]), agent_id=agent["id"])
        assert memfs.revision() == wrote["commit_sha"] and memfs.read_head("notes.md") == "on disk"
        task = await ask(c, "cron_add", agent_id=agent["id"], name="n", description="",
                         cron="*/5 * * * *", recurring=True, prompt="check")
        assert task["success"], task
        listed = await ask(c, "list_in_directory", path=str(project))
        assert listed["success"] and listed["folders"] == []
    assert (home / "cron.db").is_file()
