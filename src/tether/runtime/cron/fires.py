"""The rows a fire is made of, as the store hands them out: a claimed slot (`Fire`), a fire on
its way into a conversation (`FireClaim`, one `fires` row) and one being submitted
(`Delivery`, what commits with it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Fire:
    """One claimed slot: the task as read (to be updated in place), the run record to log, or
    the `FireClaim` that will carry the prompt into the conversation."""

    def __init__(self, task: dict[str, Any], last_slot_ms: int) -> None:
        self.task = task
        self.last_slot_ms = last_slot_ms
        self.record: dict[str, Any] | None = None
        self.claim: FireClaim | None = None
        self.now_ms = 0


@dataclass(frozen=True, slots=True)
class FireClaim:
    """A fire's row: where its prompt goes and how far it got."""

    key: str
    task_id: str
    slot_ms: int
    state: str
    owner: str
    conversation_id: str
    text: str
    reason: str
    missed: int


class Delivery:
    """A fire being submitted: the task as it is now (None: deleted), and what to commit."""

    def __init__(self, claim: FireClaim, task: dict[str, Any] | None) -> None:
        self.claim = claim
        self.task = task
        self.task_changed = False
        self.record: dict[str, Any] | None = None
        self.state: str | None = None
        self.now_ms = 0


FIRE_COLUMNS = "key, task_id, slot_ms, state, owner, conversation_id, text, reason, missed"


def fire_claim(row: tuple[Any, ...]) -> FireClaim:
    key, task_id, slot_ms, state, owner, conversation, text, reason, missed = row
    return FireClaim(
        str(key),
        str(task_id),
        int(slot_ms),
        str(state),
        str(owner),
        str(conversation),
        bytes(text).decode(),
        str(reason),
        int(missed),
    )
