"""The gateway's link to a real in-process App Server coming back on a new connection: a runtime
started on the old connection is never used on the new one, and an input the server refuses as
"not started on this connection" (the race the tester hit after a restart) starts the runtime
again and is re-sent, never refused to the chat."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.server.support import InProcess, point_at
from tether.backends.local.store import LocalStore
from tether.channels.config import Route
from tether.channels.gateway import Gateway
from tether.channels.plugins import InboundMessage
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


async def relinked(gw: Gateway, before: int) -> None:
    for _ in range(500):
        if gw.link.generation > before and gw.link.connected.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the link did not come back")


def test_a_runtime_of_an_old_connection_is_started_again_and_the_message_resent(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = LocalStore(tether_home).create_agent(model="anthropic/claude-test", system="s").id
    route = Route("webhook", "default", "c1", agent, cwd=str(project))

    def message(n: int) -> InboundMessage:
        return InboundMessage("webhook", "default", "c1", "u1", f"hello {n}", time.time(), f"m{n}")

    async def scenario() -> list[dict[str, object]]:
        async with InProcess(project) as srv:
            gw = Gateway(tether_home, srv.url)
            reader = asyncio.ensure_future(gw.link.run())
            try:
                await asyncio.wait_for(gw.link.connected.wait(), 10)
                old = await gw.ensure_runtime(route)
                answers = [(await gw.submit(route, message(1), 1))[0]]
                before = gw.link.generation
                await gw.link.ws.close()  # the connection goes; the link makes a new one
                await relinked(gw, before)
                # A send on the new connection before the runtime was started on it: the
                # handle of the old connection, taken for a current one.
                old.generation = gw.link.generation
                gw.runtimes[route.key()] = old
                answers.append((await gw.submit(route, message(2), 2))[0])
                assert gw.runtimes[route.key()] is not old
                # And a handle of an older connection is not even tried.
                stale = gw.runtimes[route.key()]
                stale.generation = 0
                answers.append((await gw.submit(route, message(3), 3))[0])
                assert gw.runtimes[route.key()] is not stale
                return answers
            finally:
                await gw.link.close()
                reader.cancel()
                gw.journal.close()

    with FakeProvider([{"text": "ok"}] * 3) as fake:
        point_at(fake, monkeypatch)
        answers = asyncio.run(scenario())
    for answer in answers:
        assert answer.get("type") == "input_accepted" and answer["accepted"] is True, answer


class ChatRecorder:
    """The chat side of an adapter: what the gateway says in the chat."""

    def __init__(self) -> None:
        self.said: list[str] = []

    async def send_direct_reply(self, chat_id: str, text: str, **opts: object) -> dict[str, str]:
        self.said.append(text)
        return {"message_id": f"said-{len(self.said)}"}


def test_an_approval_answered_after_the_link_came_back_reaches_the_turn_once(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = LocalStore(tether_home).create_agent(model="anthropic/claude-test", system="s").id
    route = Route("webhook", "default", "c1", agent, cwd=str(project))
    write = {"name": "Bash", "arguments": {"command": "touch approved.txt", "description": "make it"}}

    async def scenario() -> list[str]:
        async with InProcess(project) as srv:
            gw = Gateway(tether_home, srv.url)
            chat = ChatRecorder()
            gw.adapters[("webhook", "default")] = chat  # type: ignore[assignment]
            reader = asyncio.ensure_future(gw.link.run())
            try:
                await asyncio.wait_for(gw.link.connected.wait(), 10)
                msg = InboundMessage("webhook", "default", "c1", "u1", "make it", time.time(), "m1")
                gw.journal.receive(msg)
                [(seq, _)] = gw.journal.queued()
                answer, _ = await gw.submit(route, msg, seq)
                assert answer["accepted"], answer
                gw.journal.handled(seq, f"submitted:{route.key()}")
                for _ in range(500):
                    if gw.asks:
                        break
                    await asyncio.sleep(0.01)
                assert gw.asks, chat.said
                [ask] = gw.asks.values()
                before = gw.link.generation
                await gw.link.ws.close()  # the question stays open on the server
                await relinked(gw, before)
                await gw.answer_ask(ask, True, "")
                for _ in range(1000):
                    if (project / "approved.txt").exists() and not gw.turns.awaiting:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.3)
                return chat.said
            finally:
                await gw.link.close()
                reader.cancel()
                gw.journal.close()

    with FakeProvider([{"tool_calls": [write]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        said = asyncio.run(scenario())
    assert (project / "approved.txt").exists()
    assert len([s for s in said if s.startswith("Approval needed")]) == 1, said
