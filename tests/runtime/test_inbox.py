"""The conversation inbox (`runtime/turns/inbox.py`) over a real session against the fake provider:
arrival order, one turn at a time, abort, the bound, close(), coalescing, and the turn lock
that keeps a second process out."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tether.core.approvals import JudgedCall
from tether.core.tools import ToolContext
from tether.core.turn import ApprovalAnswer, Event, TurnOutcome
from tether.errors import ConversationBusy, TetherError
from tether.protocol.messages import TextPart
from tether.protocol.turns import TurnError
from tether.runtime.turns.inbox import (
    Cancelled,
    Inbox,
    InboxClosed,
    QueueFull,
    Submission,
    TurnPlan,
    user_message,
)
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


class Deny:
    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        return ApprovalAnswer(False, "denied by the test")


class Recorder:
    """A frontend that records what it saw: batches begun and ended (with overlap checks),
    events, and the errors `failed` was given."""

    def __init__(self) -> None:
        self.begun: list[list[str]] = []
        self.ended: list[tuple[list[str], str]] = []
        self.events: list[Event] = []
        self.errors: list[Exception] = []
        self.inside = 0
        self.most_inside = 0
        self.fail_with: Exception | None = None

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.begun.append([s.id for s in batch])
        await asyncio.sleep(0)  # a racing submit gets its chance here
        parts = tuple(p for s in batch for p in s.parts)
        return TurnPlan(user=user_message(parts), emit=self.events.append, approver=Deny())

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        self.errors.append(exc)
        if self.fail_with is not None:
            raise self.fail_with
        return TurnOutcome(stop_reason="error", error=TurnError(str(exc), "error"))

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        self.inside -= 1
        self.ended.append(([s.id for s in batch], outcome.stop_reason))
        return outcome.stop_reason == "end_turn"


def session(root: Path, url: str) -> Any:
    from tether.runtime.session.assembly import RunSpec, prepare
    from tether.runtime.session.flags import RunFlags

    work = root / "project"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test"}
    flags = RunFlags(headless=True, prompt=None, model=MODEL)
    return prepare(flags, RunSpec(cwd=work, env=env, home=root / "home"))


def said(request: dict[str, Any]) -> str:
    """The text of the last user message the model was sent."""
    return json.dumps(request["body"]["messages"][-1])


def text(value: str) -> tuple[TextPart, ...]:
    return (TextPart(value),)


async def until(check: Any, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_submissions_run_in_arrival_order_one_turn_each(tmp_path: Path) -> None:
    with FakeProvider([{"text": "one"}, {"text": "two"}, {"text": "three"}]) as fake:

        async def scenario() -> None:
            rec = Recorder()
            inbox = Inbox(session(tmp_path, fake.url), rec)
            items = [inbox.submit(text(word)) for word in ("alpha", "beta", "gamma")]
            outcomes = [await item.done for item in items if item.done is not None]
            assert [o.stop_reason for o in outcomes if o is not None] == ["end_turn"] * 3
            assert rec.begun == [[i.id] for i in items]
            await inbox.close()

        asyncio.run(scenario())
        assert [w in said(r) for r, w in zip(fake.requests, ("alpha", "beta", "gamma"), strict=True)] == [True] * 3


def test_racing_submits_still_run_one_at_a_time(tmp_path: Path) -> None:
    script = [{"text": f"answer {i}", "delay_ms": 150} for i in range(4)]
    with FakeProvider(script) as fake:

        async def scenario() -> None:
            rec = Recorder()
            inbox = Inbox(session(tmp_path, fake.url), rec)

            async def send(word: str) -> Submission:
                await asyncio.sleep(0)
                return inbox.submit(text(word))

            items = await asyncio.gather(*(send(f"w{i}") for i in range(4)))
            await inbox.drained()
            assert rec.most_inside == 1  # never two batches at once
            assert [e[1] for e in rec.ended] == ["end_turn"] * 4
            assert sorted(b[0] for b in rec.begun) == sorted(i.id for i in items)
            await inbox.close()

        asyncio.run(scenario())
        assert len(fake.requests) == 4


def test_abort_stops_the_running_turn_and_leaves_the_queue(tmp_path: Path) -> None:
    with FakeProvider([{"text": "never", "delay_ms": 8000}, {"text": "second answer"}]) as fake:

        async def scenario() -> None:
            rec = Recorder()
            inbox = Inbox(session(tmp_path, fake.url), rec)
            assert inbox.abort() is False  # nothing runs yet
            first = inbox.submit(text("slow one"))
            second = inbox.submit(text("after it"))
            await until(lambda: len(fake.requests) == 1, "the first request")
            assert inbox.abort("run-that-is-not-this-one") is False
            started = time.monotonic()
            assert inbox.abort() is True
            assert first.done is not None and second.done is not None
            outcome = await first.done
            assert outcome is not None and outcome.interrupted
            assert time.monotonic() - started < 5
            after = await second.done
            assert after is not None and after.stop_reason == "end_turn"
            await inbox.close()

        asyncio.run(scenario())
        assert len(fake.requests) == 2 and "after it" in said(fake.requests[1])


def test_a_full_queue_refuses_with_a_clear_error(tmp_path: Path) -> None:
    with FakeProvider([{"text": "slow", "delay_ms": 1500}, {"text": "b"}]) as fake:

        async def scenario() -> None:
            inbox = Inbox(session(tmp_path, fake.url), Recorder(), max_queue=1)
            inbox.submit(text("a"))
            await until(lambda: inbox.busy, "the first turn")
            inbox.submit(text("b"))
            with pytest.raises(QueueFull, match=r"queue is full \(1 inputs waiting\)"):
                inbox.submit(text("c"))
            assert [s.parts for s in inbox.queue] == [text("b")]
            await inbox.drained()
            await inbox.close()

        asyncio.run(scenario())
        assert len(fake.requests) == 2


def test_close_cancels_what_waits_with_the_reason(tmp_path: Path) -> None:
    with FakeProvider([{"text": "never", "delay_ms": 8000}, {"text": "unused"}]) as fake:

        async def scenario() -> None:
            rec = Recorder()
            prepared = session(tmp_path, fake.url)
            inbox = Inbox(prepared, rec)
            running = inbox.submit(text("slow"))
            waiting = [inbox.submit(text(w)) for w in ("b", "c")]
            await until(lambda: len(fake.requests) == 1, "the first request")
            cancelled = await inbox.close("the server is shutting down", timeout=10)
            assert cancelled == waiting
            for item in waiting:
                assert item.done is not None
                with pytest.raises(Cancelled, match="the server is shutting down"):
                    await item.done
            assert running.done is not None
            outcome = await running.done
            assert outcome is not None and outcome.interrupted
            with pytest.raises(InboxClosed, match="shutting down"):
                inbox.submit(text("late"))
            assert inbox.worker.done()

        asyncio.run(scenario())
        assert len(fake.requests) == 1


def test_waiting_submissions_coalesce_into_one_turn(tmp_path: Path) -> None:
    with FakeProvider([{"text": "together"}, {"text": "alone"}]) as fake:

        async def scenario() -> None:
            rec = Recorder()
            inbox = Inbox(session(tmp_path, fake.url), rec, coalesce=True)
            a, b = inbox.submit(text("line a")), inbox.submit(text("line b"))
            solo = inbox.submit(text("solo"), coalesce=False)
            await inbox.drained()
            assert rec.begun == [[a.id, b.id], [solo.id]]
            gone = inbox.submit(text("withdrawn"))  # the worker has not taken it yet
            assert inbox.withdraw(gone.id, "the client left") is gone
            assert gone.done is not None
            with pytest.raises(Cancelled, match="the client left"):
                await gone.done
            await inbox.close()

        asyncio.run(scenario())
        assert len(fake.requests) == 2
        assert "line a" in said(fake.requests[0]) and "line b" in said(fake.requests[0])


def test_the_turn_lock_keeps_a_second_process_out(tmp_path: Path) -> None:
    with FakeProvider([{"text": "after the other process"}]) as fake:
        prepared = session(tmp_path, fake.url)
        agent, conversation = prepared.session.agent.id, prepared.session.conversation_id
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from tether.backends.local.store import LocalStore\n"
             f"with LocalStore({str(prepared.store.home)!r}).turn_lock({agent!r}, {conversation!r}):\n"
             "    print('held', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"

            async def scenario() -> None:
                rec = Recorder()
                inbox = Inbox(prepared, rec)
                refused = inbox.submit(text("while held"))
                assert refused.done is not None
                outcome = await refused.done
                assert outcome is not None and outcome.stop_reason == "error"
                assert len(rec.errors) == 1 and isinstance(rec.errors[0], ConversationBusy)
                assert fake.requests == []  # nothing reached the model
                assert holder.stdin is not None
                holder.stdin.close()
                await asyncio.to_thread(holder.wait, 10)
                ok = inbox.submit(text("now"))
                assert ok.done is not None
                outcome = await ok.done
                assert outcome is not None and outcome.stop_reason == "end_turn"
                await inbox.close()

            asyncio.run(scenario())
        finally:
            holder.kill()
            holder.wait()
            for pipe in (holder.stdin, holder.stdout):
                if pipe is not None:
                    pipe.close()
        assert len(fake.requests) == 1


def test_an_error_the_frontend_raises_stops_the_worker_and_cancels_the_rest(tmp_path: Path) -> None:
    with FakeProvider([]) as fake:
        prepared = session(tmp_path, fake.url)
        lock = prepared.store.turn_lock(prepared.session.agent.id, prepared.session.conversation_id)

        async def scenario() -> None:
            rec = Recorder()
            rec.fail_with = TetherError("the frontend gave up")
            inbox = Inbox(prepared, rec)
            with lock:  # this process holds the lock: the turn fails as busy
                first, rest = inbox.submit(text("a")), inbox.submit(text("b"))
                assert first.done is not None and rest.done is not None
                with pytest.raises(TetherError, match="the frontend gave up"):
                    await first.done
                with pytest.raises(Cancelled, match="the conversation stopped"):
                    await rest.done
            assert isinstance(inbox.failure, TetherError) and inbox.worker.done()
            await inbox.close()

        asyncio.run(scenario())
        assert fake.requests == []


def test_idle_is_told_and_a_front_submission_runs_next(tmp_path: Path) -> None:
    script = [{"text": "slow", "delay_ms": 600}, {"text": "urgent answer"}, {"text": "later answer"}]
    with FakeProvider(script) as fake:

        async def scenario() -> None:
            rec = Recorder()
            idle: list[tuple[bool, int]] = []
            inbox: Inbox | None = None

            def on_idle() -> None:
                assert inbox is not None
                idle.append((inbox.busy, len(inbox.queue)))

            inbox = Inbox(session(tmp_path, fake.url), rec, max_queue=1, on_idle=on_idle)
            await asyncio.sleep(0.05)
            assert idle == [(False, 0)]  # the worker started with nothing to do
            first = inbox.submit(text("first"))
            await until(lambda: inbox.busy, "the first turn")
            later = inbox.submit(text("later"))
            urgent = inbox.put(Submission(parts=text("urgent")), front=True)  # past the bound too
            await inbox.drained()
            assert rec.begun == [[first.id], [urgent.id], [later.id]]
            await until(lambda: len(idle) >= 2, "the idle notice")
            await asyncio.sleep(0.2)  # a reflection ending tells it again, only when idle too
            assert set(idle) == {(False, 0)}
            await inbox.close()

        asyncio.run(scenario())
        assert "urgent" in said(fake.requests[1]) and "later" in said(fake.requests[2])


class Human:
    """An approver that waits for the test to answer, or for the turn's abort."""

    def __init__(self, abort: asyncio.Event) -> None:
        self.abort = abort
        self.answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        aborted = asyncio.ensure_future(self.abort.wait())
        try:
            await asyncio.wait({self.answer, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if not self.answer.done():
            return ApprovalAnswer(False, "interrupted", interrupt=True)
        return ApprovalAnswer(self.answer.result(), "answered by the test")


class Asking(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.humans: list[Human] = []

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        plan = await super().begin(batch, abort)
        assert plan is not None
        self.humans.append(Human(abort))
        plan.approver = self.humans[-1]
        return plan


def test_the_inbox_knows_which_calls_wait_for_an_answer(tmp_path: Path) -> None:
    write = {"name": "Write", "arguments": {"file_path": "a.txt", "content": "x"}, "id": "call-w1"}
    again = {**write, "id": "call-w2"}
    script = [{"tool_calls": [write]}, {"text": "denied, fine"}, {"tool_calls": [again]}]
    with FakeProvider(script) as fake:

        async def scenario() -> None:
            rec = Asking()
            inbox = Inbox(session(tmp_path, fake.url), rec)
            assert inbox.pending_approvals == ()
            first = inbox.submit(text("write a.txt"))
            await until(lambda: inbox.pending_approvals, "the approval question")
            (pending,) = inbox.pending_approvals
            assert (pending.tool_call_id, pending.tool_name) == ("call-w1", "Write")
            assert pending.reason and pending.asked_at_ms > 0
            rec.humans[0].answer.set_result(False)
            assert first.done is not None and (await first.done) is not None
            assert inbox.pending_approvals == ()
            second = inbox.submit(text("write it again"))
            await until(lambda: inbox.pending_approvals, "the second question")
            assert [p.tool_call_id for p in inbox.pending_approvals] == ["call-w2"]
            assert inbox.abort() is True  # an abort leaves no question open
            assert second.done is not None
            outcome = await second.done
            assert outcome is not None and outcome.interrupted
            assert inbox.pending_approvals == ()
            await inbox.close()

        asyncio.run(scenario())
    assert not (tmp_path / "project" / "a.txt").exists()
