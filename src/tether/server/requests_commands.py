"""`execute_command` (reference §12.3): a slash command run on a runtime this connection
started, answered, as the reference answers it, by `command_start` and `command_end` stream
deltas to the runtime's clients (no `_response` frame). The ids are `v2_frames.SUPPORTED_COMMANDS`
(advertised in `update_device_status`): `compact` (the `/compact` of the TUI) and `reload` (the
runtime built again from its agent's record). None of them runs a shell; an unknown id ends
with `success: false`."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError
from tether.protocol.chunks import iso_now
from tether.server.protocol_v2 import RuntimeScope
from tether.server.request_kit import Call, Request, RequestFailed, Scope, request
from tether.server.v2_frames import SUPPORTED_COMMANDS

if TYPE_CHECKING:
    from tether.server.runtime import ConversationRuntime


async def _compact(rt: ConversationRuntime, args: str) -> str:
    from tether.backends.local.backend import LocalBackend

    p = rt.p
    if not isinstance(p.backend, LocalBackend):
        raise RequestFailed("a hosted conversation is compacted by its Letta server")
    with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
        done = await p.backend.compact(p.conversation)
    stats = ", ".join(f"{k} {v}" for k, v in done.stats.items())
    return f"Compacted{': ' + stats if stats else ''}\n{done.summary}".rstrip()


async def _reload(rt: ConversationRuntime, args: str) -> str:
    rt.reload_agent()
    return f"Reloaded the runtime from agent {rt.p.session.agent.id}'s record"


COMMANDS: dict[str, Callable[[ConversationRuntime, str], Awaitable[str]]] = {
    "compact": _compact,
    "reload": _reload,
}
assert tuple(COMMANDS) == SUPPORTED_COMMANDS


async def execute_command(call: Call) -> dict[str, Any]:
    scope = RuntimeScope(*call.read.runtime())
    rt = call.conn.runtimes.get(scope)
    if rt is None:
        raise RequestFailed(f"runtime {scope.agent_id}/{scope.conversation_id} is not started on "
                            "this connection; send runtime_start first")
    command_id = call.text("command_id")
    args = call.frame.msg.get("args") or ""
    if not isinstance(args, str):
        raise call.read.fail("args", "must be a string (everything after the command name)")
    text = f"/{command_id}{' ' + args if args else ''}"
    ident = call.frame.request_id or uuid.uuid4().hex[:12]
    base = {"command_id": command_id, "input": text}
    rt.broadcast(rt.stream.delta_frame({"message_type": "command_start",
                                        "id": f"command-start-{ident}", "date": iso_now(),
                                        **base}))
    run = COMMANDS.get(command_id)
    try:
        if run is None:
            raise RequestFailed(f"Unknown command: /{command_id} (this server runs "
                                f"{', '.join('/' + c for c in SUPPORTED_COMMANDS)})")
        if rt.busy:
            raise RequestFailed(f"/{command_id}: the conversation is running a turn; "
                                "try when it ends")
        output, success = await run(rt, args), True
    except (RequestFailed, TetherError, OSError) as exc:  # the command's end says why
        output, success = str(exc), False
    rt.broadcast(rt.stream.delta_frame({"message_type": "command_end",
                                        "id": f"command-end-{ident}", "date": iso_now(),
                                        **base, "output": output, "success": success}))
    return {}


FAMILY: dict[str, Request] = {
    "execute_command": request("command_id runtime args", execute_command, Scope.OWN,
                               answered=False),
}
