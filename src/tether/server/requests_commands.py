"""`execute_command` (reference §12.3, `handleExecuteCommand`): a slash command run on a runtime
this connection started, told to the runtime's clients by `slash_command_start` and
`slash_command_end` stream deltas and answered by `execute_command_response {success, output}`.
The ids are `v2_frames.SUPPORTED_COMMANDS` (advertised in `update_device_status`), the
reference's ids that tether has something behind:

- `clear`: the agent's next messages go to a fresh conversation (the reference's local /clear,
  tether's `/new`); this one's history is kept, and the client moves with `runtime_start`.
- `compact`: the `/compact` of the TUI; `reload`: the runtime built again from its agent's record.
- `remember`: a turn asking the agent to commit what the user names (or the recent context)
  to its memory, queued as the user's input.
- `toolset [name]`: the conversation's toolset preference (`update_toolset`), or the current one.

The reference's other ids (`doctor`, `init`, `context-limit`, `channels`, `reflect`,
`upgrade-letta-code`) end with success false naming what this server runs. None runs a shell."""

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

REMEMBER = (
    "<system-reminder>\nThe user ran /remember: they want something kept in your memory. Work "
    "out what from their words below (or, with none, from the recent conversation; ask if it "
    "is still unclear), store it with your memory tools in the block where it belongs (a new "
    "one if none fits), without duplicating what is already there, then say briefly what you "
    "stored and where.\n</system-reminder>"
)


async def _compact(call: Call, rt: ConversationRuntime, args: str) -> str:
    from tether.backends.local.backend import LocalBackend

    p = rt.p
    if not isinstance(p.backend, LocalBackend):
        raise RequestFailed("a hosted conversation is compacted by its Letta server")
    with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
        done = await p.backend.compact(p.conversation)
    stats = ", ".join(f"{k} {v}" for k, v in done.stats.items())
    return f"Compacted{': ' + stats if stats else ''}\n{done.summary}".rstrip()


async def _reload(call: Call, rt: ConversationRuntime, args: str) -> str:
    rt.reload_agent()
    return f"Reloaded the runtime from agent {rt.p.session.agent.id}'s record"


async def _clear(call: Call, rt: ConversationRuntime, args: str) -> str:
    from tether.runtime.manage import conversations

    if call.grant.conversations is not None:
        raise RequestFailed("this connection's token is scoped to conversations; /clear "
                            "would start a new one, which it may not")
    agent_id = rt.scope.agent_id
    created = conversations.create_conversation(call.store, agent_id)
    call.notify("conversation_updated", agent_id=agent_id, conversation_id=created["id"],
                conversation=created)
    return (f"Agent's in-context messages cleared: new conversation {created['id']} "
            f"(runtime_start it to continue there; {rt.scope.conversation_id} is kept in history)")


async def _remember(call: Call, rt: ConversationRuntime, args: str) -> str:
    from tether.protocol.messages import TextPart
    from tether.server.protocol_v2 import CreateMessage, NewMessage

    key = f"remember-{call.frame.request_id or uuid.uuid4().hex[:12]}"
    parts = (TextPart(REMEMBER),) + ((TextPart(args),) if args else ())
    content = [{"type": "text", "text": part.text} for part in parts]
    answer = await rt.enqueue(
        CreateMessage(key, key, rt.scope, (NewMessage(key, parts, content),), key_given=False)
    )
    if not answer.accepted:
        raise RequestFailed(f"/remember was not queued: {answer.error}")
    return "Memory request submitted"


async def _toolset(call: Call, rt: ConversationRuntime, args: str) -> str:
    from tether.runtime.manage import toolset_ops
    from tether.tools.toolsets import resolve_toolset

    model = rt.p.session.model
    if not args:
        chosen = rt.p.flags.toolset
        return f"Toolset: {resolve_toolset(chosen, model)} (preference {chosen or 'auto'})"
    current = toolset_ops.set_preference(call.server.ctx.store, rt.scope.agent_id,
                                         rt.scope.conversation_id, args)
    rt.reload_agent()
    toolset = resolve_toolset(args, model)
    if current["current_toolset_preference"] == "auto":
        return f"Toolset mode set to auto (currently {toolset})."
    return f"Switched toolset to {toolset} (manual override)."


COMMANDS: dict[str, Callable[[Call, ConversationRuntime, str], Awaitable[str]]] = {
    "clear": _clear,
    "compact": _compact,
    "reload": _reload,
    "remember": _remember,
    "toolset": _toolset,
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
    args = args.strip()
    text = f"/{command_id}{' ' + args if args else ''}"
    ident = call.frame.request_id or uuid.uuid4().hex[:12]
    base = {"command_id": command_id, "input": text}
    rt.broadcast(rt.stream.delta_frame({"message_type": "slash_command_start",
                                        "id": f"slash-command-start-{ident}", "date": iso_now(),
                                        **base}))
    run = COMMANDS.get(command_id)
    try:
        if run is None:
            raise RequestFailed(f"Unknown command: {command_id} (this server runs "
                                f"{', '.join('/' + c for c in SUPPORTED_COMMANDS)})")
        if rt.busy and command_id != "remember":  # /remember queues behind the turn
            raise RequestFailed(f"/{command_id}: the conversation is running a turn; "
                                "try when it ends")
        output, success = await run(call, rt, args), True
    except (RequestFailed, TetherError, OSError) as exc:  # the command's end says why
        output, success = str(exc), False
    rt.broadcast(rt.stream.delta_frame({"message_type": "slash_command_end",
                                        "id": f"slash-command-end-{ident}", "date": iso_now(),
                                        **base, "output": output, "success": success}))
    return {"success": success, "output": output}


FAMILY: dict[str, Request] = {
    "execute_command": request("command_id runtime args", execute_command, Scope.OWN,
                               {"output": ""}),
}
