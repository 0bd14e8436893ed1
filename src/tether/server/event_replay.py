"""Where a client's `runtime_start{after_event_seq}` (a tether extension, `protocol_v2.py`) is
answered, just before that client subscribes to the runtime, and `sync{after_event_seq}`, for a
client already subscribed.

With `--store` the frames after its seq are replayed from the `fleet_events` rows, then the live
ones follow, none missing and none twice (`fleet_events.py` `FleetEvents.resume`). A server
without `--store` keeps no history of its frames (no in-memory ring: it could not be ordered
against the live frames without a hook in the runtime's subscribe), so it answers
`runtime_replay{complete: false}` when frames after the client's seq were sent: the client
re-reads the state via `sync` (the state frames of its `runtime_start` are that already)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.server.runtime import ConversationRuntime
    from tether.server.runtime_start import ServerContext


def arrange_replay(ctx: ServerContext, rt: ConversationRuntime, after: int) -> None:
    """Called on the event loop before the resuming client subscribes to `rt`."""
    if ctx.fleet is not None:
        from tether.server.durable_inputs import conversation_key

        ctx.fleet.events.resume(conversation_key(rt.scope), rt, after)
        return
    before = frozenset(rt.subscribers)
    last = rt.stream.last_seq
    asyncio.get_running_loop().call_soon(_answer_unkept, rt, before, after, last)


def replay_to(ctx: ServerContext, rt: ConversationRuntime, sub_id: str, after: int) -> None:
    """`sync{after_event_seq}`: the same answer for `sub_id`, a client of `rt` already, called
    on the event loop before the state frames `sync` sends it (the answer comes after them;
    its live frames from now on wait for the replay)."""
    if ctx.fleet is not None:
        from tether.server.durable_inputs import conversation_key

        ctx.fleet.events.resume(conversation_key(rt.scope), rt, after, sub_id)
        return
    asyncio.get_running_loop().call_soon(_answer_sync, rt, sub_id, after, rt.stream.last_seq)


def _answer_sync(rt: ConversationRuntime, sub_id: str, after: int, last: int) -> None:
    sub = rt.subscribers.get(sub_id)
    if sub is not None:
        sub.send_frame(_unkept(rt, after, last))


def _answer_unkept(rt: ConversationRuntime, before: frozenset[str], after: int, last: int) -> None:
    """`runtime_replay` to the client that subscribed since `before`."""
    for sub_id, sub in list(rt.subscribers.items()):
        if sub_id not in before:
            sub.send_frame(_unkept(rt, after, last))
            return


def _unkept(rt: ConversationRuntime, after: int, last: int) -> dict[str, Any]:
    """Nothing replayed, complete only when the client's seq is the last one built before it
    asked (`last`); a seq above that is from another process (this one restarted), so frames
    after it may be lost as well."""
    from tether.server.v2_frames import runtime_replay

    return runtime_replay(rt.scope, after, [], None if after == last else max(after, last))
