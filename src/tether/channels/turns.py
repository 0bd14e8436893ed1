"""How a chat message the server accepted ends, for the gateway: its turn finished (answered),
its turn failed or the server could not run it (the chat is told, once), or the link it went on
went away before its turn ended (it is submitted again; its idempotency key keeps a server that
still has it from running it twice, and a restarted server's durable queue answers where it got).

The input's request id carries the message's journal seq (`gw-in-<seq>-<n>`), so a
`turn_finished` — or a restarted server's `interrupted_inputs` — names the message it ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from tether.channels.journal import Journal
from tether.channels.plugins import InboundMessage

Say = Callable[[InboundMessage, str], Awaitable[None]]

INTERRUPTED = (
    "The agent was interrupted while answering this message (its server stopped), and it was "
    "not run again: it may be unanswered or answered in part. Send it again if you still need "
    "an answer."
)


class MessageTurns:
    def __init__(self, journal: Journal, say: Say) -> None:
        self.journal = journal
        self.say = say
        # Messages submitted whose turn has not ended: seq -> the link connection (generation)
        # it went on; 0 for those an earlier gateway process submitted (asked again on the
        # first connection: the server's answer to their key says where they got).
        self.awaiting: dict[int, int] = dict.fromkeys(journal.unanswered(), 0)

    def submitted(self, seq: int, generation: int) -> None:
        self.awaiting[seq] = generation

    def requeue_stale(self, generation: int) -> int:
        """Put back in the queue what went on an earlier connection and has not ended."""
        count = 0
        for seq, submitted_on in list(self.awaiting.items()):
            if submitted_on < generation:
                del self.awaiting[seq]
                count += self.journal.requeue(seq)
        return count

    async def accepted(self, msg: InboundMessage, answer: dict[str, Any], route: str) -> str:
        """The journal state for an accepted input: submitted (its turn to come), or — for a
        key the server had already — what became of the first one."""
        if not answer.get("duplicate"):
            return f"submitted:{route}"
        state = answer.get("state")
        if state == "done":
            return f"answered:{route}"
        if state == "interrupted":
            await self._tell(msg, INTERRUPTED)
            return "handled:interrupted"
        if state in ("not_run", "cancelled"):
            why = answer.get("reason") or state.replace("_", " ")
            await self._tell(
                msg,
                f"The agent did not get to this message ({why}). Send it "
                "again if you still need an answer.",
            )
            return f"handled:{state}"
        return f"submitted:{route}"  # queued or running: its turn_finished will come

    async def finished(self, frame: dict[str, Any]) -> None:
        """A `turn_finished`: its message is answered (a failed turn by saying so)."""
        seq = message_seq(frame.get("request_id"))
        if seq is None:
            return
        self.awaiting.pop(seq, None)
        error = frame.get("error")
        if not error:
            self.journal.answered(seq)
            return
        await self._settle(seq, "handled:turn-error", f"The agent could not answer: {error}")

    async def interrupted(self, reported: Any) -> None:
        """A restarted server's `interrupted_inputs`: begun, unfinished, not run again."""
        for item in reported if isinstance(reported, list) else []:
            seq = message_seq(item.get("request_id")) if isinstance(item, dict) else None
            if seq is not None:
                self.awaiting.pop(seq, None)
                await self._settle(seq, "handled:interrupted", INTERRUPTED)

    async def _settle(self, seq: int, state: str, text: str) -> None:
        known = self.journal.message(seq)
        if known is not None and self.journal.answered(seq, state):  # once, whoever comes first
            await self._tell(known[1], text)

    async def _tell(self, msg: InboundMessage, text: str) -> None:
        with contextlib.suppress(Exception):  # the platform refusing must not stop the gateway
            await self.say(msg, text)


def message_seq(request_id: Any) -> int | None:
    """The journal seq in an input's request id (`gw-in-<seq>-<n>`), if it is one of ours."""
    if not isinstance(request_id, str) or not request_id.startswith("gw-in-"):
        return None
    seq, _, _ = request_id[len("gw-in-") :].partition("-")
    return int(seq) if seq.isdigit() else None
