"""The channel gateway's journal contract, the same tests on SQLite (`$TETHER_HOME/channels/
gateway.db`) and on a real PostgreSQL store (`tether channel-gateway --store …`): a message is
recorded once, moves queued → submitted → answered, a reply is sent once; and on the store two
gateways sharing one journal never both handle one inbound message, while a dead gateway's
messages pass to a live one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.channels.journal import Journal, StoreJournal, open_journal
from tether.channels.plugins import InboundMessage
from tether.errors import ReplyTaken


def _msg(message_id: str | None = "m-1", text: str = "hi", chat: str = "chat-1") -> InboundMessage:
    return InboundMessage("telegram", "default", chat, "user-1", text, 1_700_000_000.0,
                          message_id=message_id, sender_name="Ann")


@pytest.fixture(params=["sqlite", "postgresql"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    store = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    j = open_journal(tmp_path / "home", store)
    assert isinstance(j, Journal if store is None else StoreJournal)
    yield j
    j.close()


def test_a_message_is_recorded_once_and_moves_to_answered(journal: Any) -> None:
    assert journal.receive(_msg()) is True
    assert journal.receive(_msg()) is False  # a redelivery is recognised
    assert journal.receive(_msg(None, "no id")) is True
    assert journal.receive(_msg(None, "no id")) is False  # its digest is the id
    queued = journal.queued()
    assert [m.text for _, m in queued] == ["hi", "no id"]
    seq, msg = queued[0]
    assert (msg.message_id, msg.sender_name, msg.chat_type) == ("m-1", "Ann", "direct")
    journal.handled(seq, "submitted:route-a")
    assert journal.unanswered() == [seq]
    assert [s for s, _ in journal.queued()] == [queued[1][0]]
    assert journal.last_chat("route-a")["chat_id"] == "chat-1"
    assert journal.chats_of("route-a") == {("telegram", "default", "chat-1")}
    assert journal.requeue(seq) is True and journal.requeue(seq) is False
    assert seq in [s for s, _ in journal.queued()]
    journal.handled(seq, "submitted:route-a")
    assert journal.answered(seq) is True and journal.answered(seq) is False
    assert journal.message(seq)[0] == "answered:route-a"
    journal.handled(queued[1][0], "handled:deny")
    assert journal.queued() == [] and journal.message(999) is None


def test_routes_pauses_and_replies(journal: Any) -> None:
    assert journal.route_conversation("r", "agent-1") is None
    journal.remember_conversation("r", "agent-1", "conv-1")
    journal.remember_conversation("r", "agent-1", "conv-2")
    assert journal.route_conversation("r", "agent-1") == "conv-2"
    chat = ("telegram", "default", "chat-1")
    journal.pause(chat, True)
    journal.pause(chat, True)
    assert journal.is_paused(chat) and not journal.is_paused(("telegram", "default", "x"))
    journal.pause(chat, False)
    assert not journal.is_paused(chat)
    assert journal.reply_state("call-1") is None
    journal.reply_sending("call-1", "telegram", "default", "chat-1")
    assert journal.reply_state("call-1") == ("sending", None)
    with pytest.raises(ReplyTaken, match="not sent twice"):  # either store refuses it
        journal.reply_sending("call-1", "telegram", "default", "chat-1")
    journal.reply_settled("call-1", "sent", {"message_id": "42"})
    assert journal.reply_state("call-1") == ("sent", {"message_id": "42"})
    journal.reply_sending("call-2", "telegram", "default", "chat-1")
    journal.reply_forget("call-2")
    assert journal.reply_state("call-2") is None


def test_two_gateways_on_one_store_never_both_handle_a_message(
    pg_url: str, tmp_path: Path
) -> None:
    first, second = (open_journal(tmp_path / f"home-{n}", pg_url) for n in range(2))
    try:
        # Both platforms' adapters deliver the same message: it is recorded once.
        assert [first.receive(_msg()), second.receive(_msg())] == [True, False]
        taken = [first.queued(), second.queued()]
        assert [len(t) for t in taken] == [1, 0]  # exactly one wins
        assert second.queued() == []  # and keeps it while it lives
        seq = taken[0][0][0]
        second.handled(seq, "handled:deny")  # a write of the loser is refused
        assert first.message(seq)[0] == "queued"
        first.handled(seq, "submitted:route-a")
        assert second.receive(_msg("m-2", "second")) is True
        assert [m.text for _, m in second.queued()] == ["second"]
        assert first.queued() == []
        second.reply_sending("call-1", "telegram", "default", "chat-1")
        with pytest.raises(ReplyTaken, match="not sent twice"):
            first.reply_sending("call-1", "telegram", "default", "chat-1")
    finally:
        second.close()
    # The second gateway is gone (its session ended) with a message in hand: the first takes
    # it, and a new gateway finds the first's submitted message to wait for only once it is gone.
    assert [m.text for _, m in _until_some(first.queued)] == ["second"]
    first.close()
    third = _until(lambda: open_journal(tmp_path / "home-3", pg_url),
                   lambda j: j.unanswered() == [seq])
    try:
        assert third.requeue(seq) is True
        assert sorted(m.text for _, m in third.queued()) == ["hi", "second"]
    finally:
        third.close()


def _until(make: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
    """`make()` until `ok` of it: a closed session's server process ends a moment after the
    client hangs up (a bound on a hung database, not a timing claim)."""
    deadline = time.monotonic() + 30
    while True:
        value = make()
        if ok(value) or time.monotonic() > deadline:
            return value
        if hasattr(value, "close"):
            value.close()
        time.sleep(0.05)


def _until_some(read: Callable[[], list[Any]]) -> list[Any]:
    return _until(read, bool)  # type: ignore[no-any-return]


def test_the_gateway_command_names_a_bad_store_url_without_its_password(tmp_path: Path) -> None:
    import os
    import subprocess

    from tests.e2e.support import TETHER

    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [TETHER, "channel-gateway", "--server", "ws://127.0.0.1:9/ws",
         "--store", "mysql://me:s3cret@db/x"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1 and "is not a PostgreSQL URL" in done.stderr
    assert "s3cret" not in done.stderr


def test_a_gateway_whose_reply_another_is_sending_answers_that_sends_outcome(
    pg_url: str, tmp_path: Path
) -> None:
    import asyncio
    import threading

    from tether.channels.gateway import reply_outcome

    first, second = (open_journal(tmp_path / f"home-{n}", pg_url) for n in range(2))
    try:
        first.reply_sending("call-1", "telegram", "default", "chat-1")
        settle = threading.Timer(0.3, first.reply_settled, ("call-1", "sent", {"message_id": "42"}))
        settle.start()
        with pytest.raises(ReplyTaken):
            second.reply_sending("call-1", "telegram", "default", "chat-1")
        assert asyncio.run(reply_outcome(second, "call-1")) == ("Sent (message id 42)", False)
        settle.join()
        first.reply_sending("call-2", "telegram", "default", "chat-1")  # never settles
        text, is_error = asyncio.run(reply_outcome(second, "call-2", wait_s=0.3))
        assert is_error and "may have been delivered, so it is not sent again" in text
    finally:
        first.close()
        second.close()
