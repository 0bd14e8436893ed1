"""kill -9 of the real `tether server` with inputs queued (issue 29 item 1): after a restart each
acknowledged input is in the transcript exactly once, in order; the one whose turn was running
is reported as interrupted, never run again; a retried idempotency key is a duplicate; the
OpenAI bridge's queued input survives too."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.e2e.support import transcript_lines
from tests.server.support import MODEL, Client, ServerProcess, bash, server_env
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider


def _user_texts(home: Path) -> list[str]:
    texts = []
    for line in transcript_lines(home):
        message = line.get("message", {})
        if message.get("role") == "user":
            texts.append(" ".join(p["text"] for p in message["content"] if p["type"] == "text"))
    return texts


def _assistant_texts(home: Path) -> list[str]:
    out = []
    for line in transcript_lines(home):
        message = line.get("message", {})
        if message.get("role") == "assistant":
            out.append("".join(p.get("text", "") for p in message["content"]))
    return out


def _wait_until(check: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _states(home: Path) -> list[tuple[str | None, str]]:
    """(request_id, state) of each input the server recorded, oldest first."""
    if not (home / "inputs.db").exists():
        return []
    db = sqlite3.connect(home / "inputs.db")
    try:
        return [(r[0], r[1]) for r in db.execute("SELECT request_id, state FROM inputs ORDER BY seq")]
    except sqlite3.OperationalError:  # no table yet
        return []
    finally:
        db.close()


def _project_and_home(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    project.mkdir()
    return project, tmp_path / "tether-home"


def _kill_9_once_running(server: ServerProcess, fake: FakeProvider, queue: Any) -> Any:
    """Run the coroutine function `queue` against the server (what it returns is returned),
    wait for the first turn's provider request, then kill -9 the server."""
    try:
        result = asyncio.run(queue())
        _wait_until(lambda: len(fake.requests) == 1, "the first turn's provider request")
        server.kill_9()
    finally:
        server.stop()
    return result


def _chat(base: str, agent: str, text: str, key: str | None = None) -> httpx.Response | None:
    """POST /v1/chat/completions of one user message; None when the server dies under it."""
    body = {"model": agent, "messages": [{"role": "user", "content": text}]}
    headers = {"Idempotency-Key": key} if key else {}
    try:
        return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30, headers=headers)
    except httpx.HTTPError:
        return None


def _kill_9_with_one_running_one_waiting(
    server: ServerProcess, fake: FakeProvider, home: Path, running: Any, waiting: Any
) -> None:
    """Post `running` (its turn starts), then `waiting` (queued behind it), each from its own
    thread; once both inputs are on disk kill -9 the server."""
    first = threading.Thread(target=running)
    first.start()
    _wait_until(lambda: len(fake.requests) == 1, "the first turn's provider request")
    second = threading.Thread(target=waiting)
    second.start()
    try:
        _wait_until(lambda: len(_states(home)) == 2, "the second input on disk")
        server.kill_9()
    finally:
        server.stop()
        first.join(10)
        second.join(10)


def test_kill_9_with_inputs_queued_runs_each_once_in_order(tmp_path: Path) -> None:
    project, home = _project_and_home(tmp_path)
    script = [
        {"fault": {"hang": True}},  # the first input's turn: running when the server dies
        {"text": "two done"},
        {"text": "three done"},
        {"text": "four done"},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        first = ServerProcess(env, project)

        async def queue_three() -> dict[str, str]:
            async with connect(first.url) as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                for n, text in enumerate(("one", "two", "three"), 1):
                    await c.say(runtime, text, request_id=f"in-{n}", idempotency_key=f"key-{n}")
                    accepted = await c.of_type("input_accepted", request_id=f"in-{n}")
                    assert accepted["accepted"], accepted
                    assert accepted["disposition"] == ("started" if n == 1 else "queued")
                return runtime

        runtime = _kill_9_once_running(first, fake, queue_three)
        assert _user_texts(home) == ["one"]  # the running turn's input reached the transcript

        second = ServerProcess(env, project)
        try:

            async def after_restart() -> tuple[dict[str, Any], dict[str, Any]]:
                async with connect(second.url) as ws:
                    c = Client(ws)
                    started = await c.start(project, **runtime)
                    # A retried send: its key, a new request id.
                    await c.say(runtime, "two again", request_id="retry-2", idempotency_key="key-2")
                    duplicate = await c.of_type("input_accepted", request_id="retry-2")
                    _wait_until(lambda: "three done" in _assistant_texts(home), "the resumed turns")
                    # A client numbering its requests afresh: a request id alone is no key
                    # across a restart, so this new input is not taken for the old in-1.
                    await c.say(runtime, "four", request_id="in-1")
                    await c.of_type("turn_finished", request_id="in-1", timeout=30)
                    return started, duplicate

            started, duplicate = asyncio.run(after_restart())
        finally:
            assert second.stop() == 0
    assert _user_texts(home) == ["one", "two", "three", "four"]  # each once, in order
    assert _assistant_texts(home) == ["two done", "three done", "four done"]
    assert len(fake.requests) == 4 and fake.violations == []  # nothing ran twice
    (interrupted,) = started["interrupted_inputs"]
    assert interrupted["request_id"] == "in-1" and interrupted["state"] == "interrupted"
    assert interrupted["idempotency_key"] == "key-1"
    assert "not run again" in interrupted["reason"]
    assert duplicate["accepted"] and duplicate["duplicate"] is True
    assert duplicate["state"] in ("queued", "running", "done")
    assert _states(home) == [
        ("in-1", "interrupted"), ("in-2", "done"), ("in-3", "done"), ("in-1", "done")
    ]


def test_sigterm_keeps_queued_inputs_for_the_next_start(tmp_path: Path) -> None:
    """A clean stop cancels the running turn (its client gets turn_finished) and keeps what
    waits: the next start runs it, once."""
    project, home = _project_and_home(tmp_path)
    script = [{"fault": {"hang": True}}, {"text": "two done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        first = ServerProcess(env, project)

        async def queue_two() -> None:
            async with connect(first.url) as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                for n, text in enumerate(("one", "two"), 1):
                    await c.say(runtime, text, request_id=f"in-{n}")
                    assert (await c.of_type("input_accepted", request_id=f"in-{n}"))["accepted"]

        try:
            asyncio.run(queue_two())
            _wait_until(lambda: len(fake.requests) == 1, "the first turn's provider request")
        finally:
            assert first.stop() == 0
        second = ServerProcess(env, project)
        try:
            _wait_until(lambda: "two done" in _assistant_texts(home), "the kept input's turn")
        finally:
            assert second.stop() == 0
    assert _user_texts(home) == ["one", "two"]
    assert len(fake.requests) == 2
    assert [state for _, state in _states(home)] == ["done", "done"]


def test_kill_9_keeps_the_openai_bridge_input_waiting_behind_a_turn(tmp_path: Path) -> None:
    """The resumed request's client is gone: its turn runs, and what would ask is denied with
    the headless text as the bridge does (nobody is left to answer; the queue never stalls)."""
    project, home = _project_and_home(tmp_path)
    script = [
        {"fault": {"hang": True}},
        {"tool_calls": [bash("touch made-by-the-resumed-turn")]},
        {"text": "queued one ran"},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        agent = LocalStore(home).create_agent(model=MODEL, system="test", name="t").id
        first = ServerProcess(env, project, "--openai-api")
        _kill_9_with_one_running_one_waiting(
            first,
            fake,
            home,
            lambda: _chat(first.http_base, agent, "hanging"),
            lambda: _chat(first.http_base, agent, "waiting"),
        )
        second = ServerProcess(env, project, "--openai-api")
        try:
            _wait_until(lambda: "queued one ran" in _assistant_texts(home), "the resumed turn")
        finally:
            assert second.stop() == 0
    assert _user_texts(home) == ["hanging", "waiting"]
    assert len(fake.requests) == 3
    assert "Tool requires approval" in json.dumps(fake.requests[2]["body"])
    assert not (project / "made-by-the-resumed-turn").exists()
    assert [state for _, state in _states(home)] == ["interrupted", "done"]


MESSAGE_CHANNEL = {
    "name": "MessageChannel",
    "description": "Send a message to the chat",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def test_a_resumed_input_calls_the_client_tool_once_its_client_is_back(tmp_path: Path) -> None:
    """A channel's message queued behind a running turn: after kill -9 and a restart its turn
    runs with the conversation's client-executed tool registered again, and the call goes to
    the client when it reconnects (not to nobody, not twice)."""
    project, home = _project_and_home(tmp_path)
    script = [
        {"fault": {"hang": True}},
        {"tool_calls": [{"name": "MessageChannel", "arguments": {"text": "reply to two"}}]},
        {"text": "replied"},
    ]
    tools = [{"scope_id": "chat-1", "tools": [MESSAGE_CHANNEL]}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        first = ServerProcess(env, project)

        async def queue_two() -> dict[str, str]:
            async with connect(first.url) as ws:
                c = Client(ws)
                runtime = (await c.start(project, external_tools=tools))["runtime"]
                for n, text in enumerate(("one", "two"), 1):
                    await c.say(runtime, text, request_id=f"msg-{n}")
                    assert (await c.of_type("input_accepted", request_id=f"msg-{n}"))["accepted"]
                return runtime

        runtime = _kill_9_once_running(first, fake, queue_two)
        second = ServerProcess(env, project)
        try:
            # The resumed turn reaches its tool call before the client is back.
            _wait_until(lambda: len(fake.requests) >= 2, "the resumed turn's provider request")

            async def come_back() -> tuple[dict[str, Any], dict[str, Any]]:
                async with connect(second.url) as ws:
                    c = Client(ws)
                    await c.send({"type": "runtime_start", "request_id": "back",
                                  "cwd": str(project), "external_tools": tools, **runtime})
                    # The waiting call goes out as the tool is registered: it may come first.
                    request = await c.of_type("external_tool_call_request")
                    await c.send({"type": "external_tool_call_response",
                                  "request_id": request["request_id"], "result": "sent"})
                    return request, await c.of_type("turn_finished", request_id="msg-2")

            request, finished = asyncio.run(come_back())
        finally:
            assert second.stop() == 0
    assert request["tool_name"] == "MessageChannel" and request["input"] == {"text": "reply to two"}
    assert finished["stop_reason"] == "end_turn"
    assert _user_texts(home) == ["one", "two"]
    assert len(fake.requests) == 3 and fake.violations == []


def test_inputs_arriving_together_share_one_commit_in_order(tmp_path: Path) -> None:
    """The group commit: inputs that arrive while a commit runs go to disk in the next one,
    in arrival order, and each caller resumes only after its own input is on disk."""
    from tether.runtime.turns.input_queue import (
        SqliteInputQueue,
        StoredInput,
        StoredMessage,
        Workspace,
    )
    from tether.server.durable_inputs import GroupCommit

    queue = SqliteInputQueue(tmp_path / "inputs.db", "owner")
    batches: list[int] = []
    accept_many = queue.accept_many

    def counting(items: Any) -> Any:
        batches.append(len(items))
        return accept_many(items)

    queue.accept_many = counting  # type: ignore[method-assign]

    def item(n: int, key: str | None = None) -> StoredInput:
        return StoredInput(
            conversation="a/c", item_id=f"q-{n}", source="user", disposition="queued",
            messages=(StoredMessage("cm", "x", ({"type": "text", "text": str(n)},)),),
            workspace=Workspace("/p", None, False), idempotency_key=key,
        )

    async def scenario() -> list[str | None]:
        writer = GroupCommit(queue)
        try:
            return list(await asyncio.gather(
                *(writer.accept(item(n, "same" if n in (3, 7) else None)) for n in range(10))
            ))
        finally:
            writer.close()

    results = asyncio.run(scenario())
    assert results == [None, None, None, None, None, None, None, "key", None, None]
    assert sum(batches) == 10 and len(batches) < 10  # grouped: fewer commits than inputs
    assert [s.item_id for s in queue.of_conversation("a/c")] == [
        f"q-{n}" for n in range(10) if n != 7
    ]
    queue.close()


def test_openai_idempotency_key_is_kept_across_kill_9(tmp_path: Path) -> None:
    """A retried OpenAI request (same Idempotency-Key) after kill -9: the one whose turn had
    begun is 409 interrupted, the resumed one is followed to its answer while it runs and is
    409 done after; nothing runs twice."""
    project, home = _project_and_home(tmp_path)
    script = [{"fault": {"hang": True}}, {"text": "answer to b", "delay_ms": 8000}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        agent = LocalStore(home).create_agent(model=MODEL, system="test", name="t").id
        first = ServerProcess(env, project, "--openai-api")
        _kill_9_with_one_running_one_waiting(
            first,
            fake,
            home,
            lambda: _chat(first.http_base, agent, "a", "key-a"),
            lambda: _chat(first.http_base, agent, "b", "key-b"),
        )
        second = ServerProcess(env, project, "--openai-api")
        base = second.http_base
        try:
            _wait_until(lambda: len(fake.requests) == 2, "the resumed turn's provider request")
            joined = _chat(base, agent, "b", "key-b")  # while the resumed turn runs
            again_b = _chat(base, agent, "b", "key-b")  # after it finished
            again_a = _chat(base, agent, "a", "key-a")
        finally:
            assert second.stop() == 0
    assert joined is not None and joined.status_code == 200, joined and joined.text
    assert joined.json()["choices"][0]["message"]["content"] == "answer to b"
    assert again_b is not None and again_b.status_code == 409
    assert "is done" in again_b.json()["error"]["message"]
    assert again_a is not None and again_a.status_code == 409
    assert "interrupted" in again_a.json()["error"]["message"]
    assert _user_texts(home) == ["a", "b"]
    assert len(fake.requests) == 2


def test_an_input_a_restart_cannot_run_is_reported_not_run(
    tmp_path: Path, tether_home: Path, monkeypatch: Any
) -> None:
    """A dead server's queued input whose conversation cannot be rebuilt (its folder is gone):
    the next server marks it not_run with the reason, and a retried key is told so."""
    from tests.server.support import InProcess, point_at
    from tether.runtime.turns.input_queue import (
        SqliteInputQueue,
        StoredInput,
        StoredMessage,
        Workspace,
    )

    project = tmp_path / "project"
    project.mkdir()
    store = LocalStore(tether_home)
    agent = store.create_agent(model=MODEL, system="test", name="t").id
    conversation = store.create_conversation(agent).id
    dead = SqliteInputQueue(tether_home / "inputs.db", "a-server-that-died")
    dead.accept(StoredInput(
        conversation=f"{agent}/{conversation}", item_id="q-0123456789ab", source="user",
        disposition="queued", messages=(StoredMessage("cm-1", "hi", ({"type": "text", "text": "hi"},)),),
        workspace=Workspace(str(tmp_path / "deleted-folder"), None, False),
        idempotency_key="key-1", request_id="key-1",
    ))
    dead.close()  # its owner lock gone, as the kernel drops a killed one's

    async def scenario() -> dict[str, Any]:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project, agent_id=agent, conversation_id=conversation))["runtime"]
            await c.say(runtime, "hi", request_id="key-1", idempotency_key="key-1")
            return await c.of_type("input_accepted", request_id="key-1")

    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)
        answer = asyncio.run(scenario())
        assert fake.requests == []  # nothing ran
    assert answer["duplicate"] is True and answer["state"] == "not_run"
    assert "could not resume" in answer["reason"] and "deleted-folder" in answer["reason"]


def test_the_transcript_decides_what_a_restart_runs_again(
    tmp_path: Path, tether_home: Path, monkeypatch: Any
) -> None:
    """Whatever state a dead server's row says (a mark may be lost with the page cache), an
    input whose user message is in the transcript is reported interrupted, and one marked
    started whose message never got there runs, in order."""
    from tests.server.support import InProcess, point_at, released
    from tether.protocol.messages import TextPart, UserMessage
    from tether.runtime.turns.input_queue import (
        SqliteInputQueue,
        StoredInput,
        StoredMessage,
        Workspace,
    )

    project = tmp_path / "project"
    project.mkdir()
    store = LocalStore(tether_home)
    agent = store.create_agent(model=MODEL, system="test", name="t").id
    conversation = store.create_conversation(agent).id
    store.transcript(agent, conversation).append(
        [UserMessage("ui-msg-1700000000000-q-aaaaaaaaaaaa", (TextPart("in the transcript"),), 1)]
    )

    def stored(item_id: str, text: str) -> StoredInput:
        return StoredInput(
            conversation=f"{agent}/{conversation}", item_id=item_id, source="user",
            disposition="queued",
            messages=(StoredMessage("cm", text, ({"type": "text", "text": text},)),),
            workspace=Workspace(str(project.resolve()), None, False), request_id=item_id,
        )

    dead = SqliteInputQueue(tether_home / "inputs.db", "a-server-that-died")
    dead.accept_many([stored("q-aaaaaaaaaaaa", "in the transcript"),
                      stored("q-bbbbbbbbbbbb", "never got there")])
    dead.mark(f"{agent}/{conversation}", "q-bbbbbbbbbbbb", "started",
              user_message_id="ui-msg-1700000000001-q-bbbbbbbbbbbb")
    dead.close()

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with InProcess(project, idle_release_after=0) as srv:
            async with srv.connect() as ws:
                c = Client(ws)
                started = await c.start(project, agent_id=agent, conversation_id=conversation)
                for _ in range(400):  # the server runs on this loop: wait without blocking it
                    if "ran it" in _assistant_texts(tether_home):
                        break
                    await asyncio.sleep(0.05)
            await released(srv, (agent, conversation))  # idle, nobody watching: released
            async with srv.connect() as ws:  # rebuilt from disk: the report survives (Kept)
                again = await Client(ws).start(project, agent_id=agent, conversation_id=conversation)
            return started, again

    with FakeProvider([{"text": "ran it"}]) as fake:
        point_at(fake, monkeypatch)
        started, again = asyncio.run(scenario())
        assert len(fake.requests) == 1
    assert [i["queue_item_id"] for i in started["interrupted_inputs"]] == ["q-aaaaaaaaaaaa"]
    assert again["interrupted_inputs"] == started["interrupted_inputs"]
    assert _user_texts(tether_home) == ["in the transcript", "never got there"]


def test_ten_inputs_from_two_clients_each_run_once_in_queue_order_after_kill_9(
    tmp_path: Path,
) -> None:
    """The tester's case (10 of 10 queued inputs lost): two clients send five inputs each at
    once behind a running turn; after kill -9 and a restart every one is in the transcript
    exactly once, in the order the server queued (and acknowledged) them."""
    project, home = _project_and_home(tmp_path)
    script: list[dict[str, Any]] = [{"fault": {"hang": True}}]
    script += [{"text": f"answer {n}"} for n in range(10)]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        first = ServerProcess(env, project)

        async def flood() -> None:
            async with connect(first.url) as ws_a, connect(first.url) as ws_b:
                a, b = Client(ws_a), Client(ws_b)
                runtime = (await a.start(project))["runtime"]
                await b.start(project, **runtime)
                await a.say(runtime, "running", request_id="run")
                await a.of_type("input_accepted", request_id="run")

                async def send(c: Client, name: str) -> None:
                    for n in range(5):
                        await c.say(runtime, f"{name}{n}", request_id=f"{name}{n}")
                    for n in range(5):
                        accepted = await c.of_type("input_accepted", request_id=f"{name}{n}")
                        assert accepted["accepted"] and accepted["disposition"] == "queued"

                await asyncio.gather(send(a, "a"), send(b, "b"))

        _kill_9_once_running(first, fake, flood)
        queued_order = [rid for rid, _ in _states(home)][1:]
        assert sorted(queued_order) == [f"a{n}" for n in range(5)] + [f"b{n}" for n in range(5)]
        second = ServerProcess(env, project)
        try:
            _wait_until(lambda: len(_assistant_texts(home)) == 10, "the ten resumed turns", 60)
        finally:
            assert second.stop() == 0
    assert _user_texts(home) == ["running", *queued_order]
    assert len(fake.requests) == 11
    assert [state for _, state in _states(home)] == ["interrupted"] + ["done"] * 10
