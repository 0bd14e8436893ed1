"""What a server of many conversations relies on per turn (issue 20 item 4), shown by behaviour,
never by timing: every concurrent conversation keeps its provider connection between turns, a
transcript append is durable before the send goes on yet its fsync runs off the event loop, the
store checks a conversation's record once, not on every send, without losing the check, and a
response body read without a timer for buffered bytes still times out where it must wait."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from tests.providers.support import make_provider, request, text_of, user
from tests.providers.test_transport import HEAD, read_request, serve
from tether.backends.local.backend import LocalBackend
from tether.backends.local.store import LocalStore
from tether.backends.local.transcript import Transcript
from tether.core.tools import ToolContext
from tether.errors import NotFound
from tether.protocol.chunks import StopReason
from tether.protocol.messages import AssistantMessage, UserMessage
from tether.protocol.turns import ConversationRef, TurnInput
from tether.providers.transport import TimedOut, stream_post
from tether.testing.fake_provider import FakeProvider

CONCURRENT = 48  # above the old idle cap of 32 per origin


def test_every_concurrent_conversation_keeps_its_connection_between_turns() -> None:
    """Two rounds of CONCURRENT overlapping model calls (each answered after 1 s, started 10 ms
    apart so the fake's listen backlog of 5 is never overrun): the second round reuses every
    connection of the first. The idle pool used to keep 32 and close the rest."""
    script = [{"text": f"answer {i}", "delay_ms": 1000} for i in range(2 * CONCURRENT)]
    with FakeProvider(script, keep_alive=True, idle_timeout_s=30) as fake:
        provider = make_provider("anthropic", fake, timeout_s=30)

        async def one(i: int) -> str:
            await asyncio.sleep(i * 0.01)
            return text_of([c async for c in provider.stream(request(user(f"hi {i}")))])

        async def main() -> tuple[list[str], int]:
            first = await asyncio.gather(*(one(i) for i in range(CONCURRENT)))
            opened = fake.connections  # every call of the first round was in flight at once
            second = await asyncio.gather(*(one(i) for i in range(CONCURRENT)))
            return [*first, *second], opened

        answers, opened = asyncio.run(main())
        assert opened == CONCURRENT, fake.stats()
        assert fake.connections == CONCURRENT, fake.stats()  # none opened for the second round
    assert sorted(answers) == sorted(f"answer {i}" for i in range(2 * CONCURRENT))
    assert fake.violations == []


@pytest.fixture
def store(tether_home: Path) -> LocalStore:
    return LocalStore(tether_home)


def local_backend(store: LocalStore, fake: FakeProvider, cwd: Path) -> LocalBackend:
    return LocalBackend(store, make_provider("anthropic", fake), provider_name="anthropic",
                        model_id="m", system="s", cwd=cwd, platform="linux", today="2026-12-03")


def test_the_record_check_is_made_once_yet_a_wrong_agent_is_still_refused(
    store: LocalStore,
) -> None:
    owner = store.create_agent(model="anthropic/m", system="s")
    other = store.create_agent(model="anthropic/m", system="s")
    conversation = store.create_conversation(owner.id)
    first = store.transcript(owner.id, conversation.id)
    record = store.conversation_dir(owner.id, conversation.id) / "conversation.json"
    record.rename(record.with_name("moved-aside.json"))  # a second look would now fail
    assert store.transcript(owner.id, conversation.id) is first  # the check is not repeated
    with pytest.raises(NotFound):
        store.transcript(other.id, conversation.id)  # a pair never checked is still checked
    record.with_name("moved-aside.json").rename(record)
    with pytest.raises(NotFound, match="belongs to agent"):
        store.transcript(other.id, conversation.id)
    with pytest.raises(NotFound):
        store.transcript(owner.id, "local-conv-999")


def test_a_send_records_durably_with_its_fsyncs_off_the_event_loop(
    store: LocalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each message is fsynced before the send goes on (a fresh reader of the file sees it the
    moment the send ends), and no fsync of the transcript runs on the loop's thread, where it
    would stall every other conversation of a server."""
    agent = store.create_agent(model="anthropic/m", system="s")
    conversation = store.create_conversation(agent.id)
    path = store.conversation_dir(agent.id, conversation.id) / "messages.jsonl"
    fsyncs: list[tuple[int, str]] = []
    real_fsync = os.fsync

    def noting_fsync(fd: int) -> None:  # the real fsync, and which thread asked for it
        target = os.readlink(f"/proc/self/fd/{fd}") if Path("/proc/self/fd").is_dir() else ""
        fsyncs.append((threading.get_ident(), target))
        real_fsync(fd)

    with FakeProvider([{"text": "pong"}], keep_alive=True) as fake:
        backend = local_backend(store, fake, tmp_path)
        ref = ConversationRef(agent.id, conversation.id)
        question = UserMessage("u-1", request().messages[0].content, 1)
        seen_after_send: list[list[str]] = []

        async def main() -> int:
            monkeypatch.setattr(os, "fsync", noting_fsync)
            turn = TurnInput(user=question)
            chunks = [
                c
                async for c in backend.send(
                    ref, turn, ToolContext("ctx-1", {}, tmp_path, "standard")
                )
            ]
            seen_after_send.append([m.id for m in Transcript(path).load()])
            assert isinstance(chunks[-1], StopReason)
            return threading.get_ident()

        loop_thread = asyncio.run(main())
    on_transcript = [t for t, target in fsyncs if target == str(path)]
    assert len(on_transcript) == 2  # the user's message, then the answer: each its own fsync
    assert loop_thread not in on_transcript
    [ids] = seen_after_send
    assert ids[0] == "u-1" and len(ids) == 2
    answer = Transcript(path).load()[1]
    assert isinstance(answer, AssistantMessage) and answer.stop_reason is not None


@pytest.mark.parametrize(
    "sent",
    [
        b"5\r\nhello\r\n1",  # a whole chunk, then half a size line: the line waits, armed
        b"5\r\nhello\r\n5\r\nhel",  # a chunk cut inside its data: the rest waits, armed
        b"5\r\nhello\r\n5\r\nhello",  # the data whole, its CRLF missing
        b"5\r\nhello\r\n0\r\n",  # the last chunk without the blank line that ends the body
    ],
)
def test_a_chunked_body_that_stalls_after_buffered_bytes_still_times_out(sent: bytes) -> None:
    """Reads of bytes already buffered arm no deadline; the read that must wait always does."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + sent)
        await writer.drain()
        await asyncio.sleep(5)

    got: list[bytes] = []

    async def main() -> None:
        async with (
            serve(handler) as url,
            stream_post(url + "/v1/x", {}, b"{}", timeout_s=0.3, env={}) as response,
        ):
            async for piece in response.iter_bytes():
                got.append(piece)

    with pytest.raises(TimedOut, match="reading the response"):
        asyncio.run(main())
    assert b"".join(got).startswith(b"hello")


def test_calls_left_open_are_settled_on_every_later_send_of_one_backend(
    store: LocalStore, tmp_path: Path
) -> None:
    """A backend remembers the history prefix it found settled and walks only what follows:
    a call left open after that mark (a turn that stopped before running it) is still
    answered on the next send, as one left open before any mark is."""
    agent = store.create_agent(model="anthropic/m", system="s")
    conversation = store.create_conversation(agent.id)
    path = store.conversation_dir(agent.id, conversation.id) / "messages.jsonl"
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}, "id": "call-1"}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "pwd"}, "id": "call-2"}]},
        {"text": "done"},
    ]
    with FakeProvider(script, keep_alive=True) as fake:
        backend = local_backend(store, fake, tmp_path)
        ref = ConversationRef(agent.id, conversation.id)
        ctx = ToolContext("ctx-1", {}, tmp_path, "standard")

        async def main() -> None:
            for n in range(3):  # each send a new user message: nobody answered the calls
                question = UserMessage(f"u-{n}", request().messages[0].content, n)
                async for _ in backend.send(ref, TurnInput(user=question), ctx):
                    pass

        asyncio.run(main())
        last_request = fake.requests[-1]["body"]["messages"]
    results = [
        (m.tool_call_id, m.is_error, m.text)
        for m in Transcript(path).load()
        if m.role == "toolResult"
    ]
    assert results == [
        ("call-1", True, "Turn did not complete"),
        ("call-2", True, "Turn did not complete"),
    ]
    answered = [
        block["tool_use_id"]
        for message in last_request
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert answered == ["call-1", "call-2"]
    assert fake.violations == []


def test_lock_and_state_files_still_make_their_missing_folders(tmp_path: Path) -> None:
    """The per-turn lock and state writes open first and make folders only when the open says
    they are missing: a fresh home still works, and an existing one is used as it is."""
    from tether.backends.local.locks import exclusive_flock, write_json_atomic

    lock = tmp_path / "a" / "b" / "turn.lock"
    for _ in range(2):  # first in a folder that does not exist yet, then in the one made
        with exclusive_flock(lock, wait=0, busy=lambda: RuntimeError("busy")):
            assert lock.is_file()
    state = tmp_path / "c" / "d" / "state.json"
    write_json_atomic(state, {"n": 1})
    write_json_atomic(state, {"n": 2})
    assert state.read_text() == '{\n  "n": 2\n}\n'
    assert sorted(p.name for p in state.parent.iterdir()) == ["state.json"]  # no temp left
