"""Shared by the fleet tests and their worker processes: the runtime's row codec for the
PostgreSQL queue, inputs, and reading the workers' JSON-line logs."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tether.backends.postgres.input_queue import RowCodec
from tether.runtime.turns import input_queue as iq
from tether.runtime.turns.input_queue import StoredInput, StoredMessage, Workspace

# The runtime's own body encoding, so a row either queue wrote decodes to the same StoredInput.
CODEC: RowCodec[StoredInput] = RowCodec(
    encode=lambda item: orjson.dumps(iq._body(item)),
    decode=iq._row,
    finished_body=iq._FINISHED_BODY,
)
CONVERSATION = "agent-1/conv-1"


def item(item_id: str, text: str = "hello", key: str | None = None,
         conversation: str = CONVERSATION) -> StoredInput:
    return StoredInput(
        conversation=conversation, item_id=item_id, source="user", disposition="queued",
        messages=(StoredMessage("cm-" + item_id, text, ({"type": "text", "text": text},)),),
        workspace=Workspace("/work/project", "standard", False),
        idempotency_key=key, request_id=f"req-{item_id}", enqueued_at="2026-01-01T00:00:00Z",
    )


def read_events(logs: Path) -> list[dict[str, Any]]:
    """Every worker's events (their JSON-line logs in `logs`), in no particular order."""
    events = []
    for path in sorted(logs.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.endswith("}"):  # a killed worker may leave a torn last line
                events.append(json.loads(line))
    return events


def wait_for(logs: Path, match: Callable[[dict[str, Any]], bool], what: str,
             deadline_s: float = 60.0) -> dict[str, Any]:
    """The first event matching `match`, polling the logs; fails naming `what` after the
    deadline (a bound on a hung fleet, not a timing claim)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for event in read_events(logs):
            if match(event):
                return event
        time.sleep(0.05)
    raise AssertionError(f"no worker reported {what} within {deadline_s} s; last events:"
                         f" {read_events(logs)[-30:]}")


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll `check` until true; fails naming `what` after `timeout` (a bound on a hung fleet,
    not a timing claim)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


async def wait_for_async(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """`wait_until` on an event loop (its sleeps yield to the loop)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
