"""The protocol v2 request families (reference §12.3) as one table, frame type → `Request`
(its fields, handler and scope rule), and the one function that answers a request, so
`app_server.py` only dispatches. Each family lives in its own `requests_<family>.py`.

Every request gets exactly one `<type>_response`: its payload and `success: true`, or
`success: false` with `error` and the payload's fields empty (terminal frames, which the
reference answers with their own frames, fail as an `error` frame instead). A bad field is
named in the error; an id the token does not grant gets the very answer a nonexistent id gets.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import traceback
from typing import TYPE_CHECKING, Any

from tether.errors import NotFound, TetherError
from tether.server import v2_frames
from tether.server.frame_reader import FrameError
from tether.server.request_kit import (
    Call,
    Request,
    RequestFailed,
    RequestFrame,
    Scope,
    check_fields,
)
from tether.server.requests_agents import FAMILY as AGENTS
from tether.server.requests_branches import FAMILY as BRANCHES
from tether.server.requests_channels import CAPABILITY as CHANNEL_REQUESTS
from tether.server.requests_channels import FAMILY as CHANNELS
from tether.server.requests_commands import FAMILY as COMMANDS
from tether.server.requests_conversations import FAMILY as CONVERSATIONS
from tether.server.requests_cron import FAMILY as CRON
from tether.server.requests_files import FAMILY as FILES
from tether.server.requests_memory import FAMILY as MEMORY
from tether.server.requests_models import FAMILY as MODELS
from tether.server.requests_queue import FAMILY as QUEUE
from tether.server.requests_reflection import FAMILY as REFLECTION
from tether.server.requests_secrets import FAMILY as SECRETS
from tether.server.requests_skills import FAMILY as SKILLS
from tether.server.requests_unsupported import FAMILY as UNSUPPORTED
from tether.server.requests_watch import FAMILY as WATCH
from tether.server.terminals import FAMILY as TERMINALS

if TYPE_CHECKING:
    from tether.server.app_server import AppServer, Connection

REQUESTS: dict[str, Request] = {
    **AGENTS, **MEMORY, **MODELS, **FILES, **SKILLS, **CRON, **TERMINALS, **REFLECTION,
    **BRANCHES, **CHANNELS, **QUEUE, **CONVERSATIONS, **SECRETS, **COMMANDS, **WATCH,
    **UNSUPPORTED,
}


# A capability is true when every request it names is answered here, and not only to say that
# tether has nothing behind it (requests_unsupported.py).
CAPABILITIES = {
    "agent_management": ("agent_list", "agent_retrieve", "agent_create", "agent_update",
                         "agent_delete"),
    "conversation_management": ("conversation_list", "conversation_retrieve",
                                "conversation_create", "conversation_update",
                                "conversation_messages_list"),
    "memory_management": ("list_memory", "read_memory_file", "write_memory_file",
                          "delete_memory_file", "memory_history"),
    "model_listing": ("list_models", "list_connect_providers"),
    "model_update": ("update_model",),
    "chatgpt_usage": ("chatgpt_usage_read",),
    "provider_connection": ("connect_provider", "disconnect_provider"),
    "toolset_update": ("update_toolset",),
    "workspace_files": ("list_in_directory", "read_file", "get_tree", "search_files",
                        "grep_in_files"),
    "workspace_file_writes": ("write_file", "edit_file", "file_ops"),
    "working_directories": ("get_cwd_map",),
    "file_watch": ("watch_file", "unwatch_file"),
    "skill_management": ("skill_enable", "skill_disable"),
    "cron_management": ("cron_list", "cron_add", "cron_get", "cron_runs", "cron_update",
                        "cron_delete", "cron_delete_all", "cron_trigger"),
    "terminals": ("terminal_spawn", "terminal_input", "terminal_resize", "terminal_kill"),
    "execute_command": ("execute_command",),
    "reflection_settings": ("get_reflection_settings", "set_reflection_settings"),
    "experiments": ("get_experiments", "set_experiment"),
    "channels": CHANNEL_REQUESTS,
    "branches": ("search_branches", "checkout_branch"),
    "secrets": ("secret_list", "secret_apply"),
}


def capabilities() -> dict[str, bool]:
    return {
        name: all(kind in REQUESTS and REQUESTS[kind].supported for kind in kinds)
        for name, kinds in CAPABILITIES.items()
    }


def parse_request(kind: str, msg: dict[str, Any], request_id: str | None) -> RequestFrame | None:
    """The checked frame when `kind` is a request family's, else None."""
    row = REQUESTS.get(kind)
    if row is None:
        return None
    return RequestFrame(kind, check_fields(kind, row, msg, request_id), msg)


def answer(server: AppServer, conn: Connection, frame: RequestFrame) -> asyncio.Future[None]:
    """Answer the request in its own task (a clone or git call never stalls other clients)."""
    return asyncio.ensure_future(_answer(server, conn, frame))


async def _answer(server: AppServer, conn: Connection, frame: RequestFrame) -> None:
    row = REQUESTS[frame.kind]
    call = Call(server, conn, frame)
    try:
        if row.scope is Scope.UNSCOPED:
            call.require_unscoped()
        elif row.scope is Scope.AGENT:
            call.agent_record = call.agent(call.text("agent_id"))
        if row.blocking:
            payload = await asyncio.to_thread(row.handler, call)
        else:
            payload = row.handler(call)
        if inspect.isawaitable(payload):
            payload = await payload
        assert isinstance(payload, dict)
        call.send_notices()
        if row.answered:
            assert frame.request_id is not None
            conn.send_frame(v2_frames.request_response(frame.kind, frame.request_id, payload))
    except Exception as exc:  # every request gets its response, whatever went wrong
        if not row.answered:
            why = _why(exc)
            conn.send_frame(v2_frames.error_frame(
                why if isinstance(exc, FrameError) else f"{frame.kind}: {why}",
                request_id=frame.request_id, frame_type=frame.kind,
            ))
            return
        conn.send_frame(
            v2_frames.request_failed(frame.kind, frame.request_id, _why(exc), _failed(row, frame))
        )


def _failed(row: Request, frame: RequestFrame) -> dict[str, Any]:
    payload = dict(row.failed)
    for spec in row.echo:  # "field" or "field>response_field"
        name, _, shown = spec.partition(">")
        value = frame.msg.get(name)
        payload[shown or name] = value if isinstance(value, str) else None
    return payload


def _why(exc: Exception) -> str:
    if isinstance(exc, (RequestFailed, FrameError)):
        return str(exc)
    if isinstance(exc, NotFound):
        return str(exc)
    if isinstance(exc, (TetherError, OSError)):
        return str(exc)
    traceback.print_exc(file=sys.stderr)  # a server bug: say so, keep the connection
    return f"internal server error ({type(exc).__name__}: {exc})"
