"""Protocol v2 frames the server sends (reference §12.3), each built by one function here.

Frames scoped to a runtime go through `EventStream`, which adds `runtime`, `event_seq`
(monotonic per runtime), `emitted_at` and `idempotency_key` (stable per event, so a client can
drop a frame it has already seen). Model output travels as `stream_delta{delta}`, the delta being
the chunk exactly as headless stream-json writes it (`type: "message"` + the Letta message
fields, built by `protocol/wire.py`). What clients send is parsed in `protocol_v2.py`.

`runtime_replay` (a tether extension, answering `runtime_start{after_event_seq}`) is sent to the
resuming client alone, without an `event_seq` of its own, just before the frames it replays.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tether import __version__
from tether.protocol import wire
from tether.protocol.chunks import ErrorChunk, RetryNotice, ToolCallRequest, iso_now
from tether.protocol.turns import LocalToolCall, LocalToolReturn, TurnError, TurnEvent

if TYPE_CHECKING:
    from tether.runtime.turns.checkpoints import RecoveredEffect
    from tether.server.protocol_v2 import RuntimeScope

PROTOCOL_VERSION = 1
WIRE_MODES = {"standard": "default", "unrestricted": "bypassPermissions"}  # tether → v2 names


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """How a runtime's turn ended, for `turn_finished` and for subscribers in this process."""

    turn_id: str
    stop_reason: str
    run_ids: tuple[str, ...]
    request_id: str | None  # the `input` frame's request_id, if the turn ran one
    error: str | None = None


@dataclass(frozen=True, slots=True)
class InputAnswer:
    """What a runtime's queue says to a create_message: the fields of `input_accepted`."""

    accepted: bool
    disposition: str | None = None  # "started" or "queued", when accepted
    queue_item_id: str | None = None
    error: str | None = None  # why not, when refused (a full queue, a closed runtime)
    duplicate: bool = False  # the same idempotency key again: this is the first answer
    # For a duplicate the durable queue knows: where the first input is now (queued, running,
    # done, cancelled, interrupted, not_run) and why, when it did not run.
    state: str | None = None
    reason: str | None = None
    full: bool = False  # refused because the queue is full (not: closed, or not recorded)

    def fields(self) -> dict[str, Any]:
        if not self.accepted:
            return {"accepted": False, "error": self.error}
        out: dict[str, Any] = {
            "accepted": True,
            "disposition": self.disposition,
            "queue_item_id": self.queue_item_id,
        }
        if self.duplicate:
            out["duplicate"] = True
            if self.state is not None:
                out["state"] = self.state
            if self.reason is not None:
                out["reason"] = self.reason
        return out


class QueuedMessage(Protocol):
    client_message_id: str
    content: Any  # as the client sent it


class QueueEntry(Protocol):
    """An input waiting in a runtime's queue, as `update_queue` lists it."""

    id: str
    messages: tuple[QueuedMessage, ...]
    source: str  # "user", or "cron": a schedule's prompt
    enqueued_at: str


class InterruptedEntry(Protocol):
    """An input whose turn a dead server began (`server/durable_inputs.py`)."""

    queue_item_id: str
    request_id: str | None
    idempotency_key: str | None
    client_message_ids: tuple[str, ...]
    source: str
    reason: str


# --- frames outside any runtime -------------------------------------------------------------------


def error_frame(
    message: str, *, request_id: str | None = None, frame_type: str | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "message": message, "emitted_at": iso_now()}
    if request_id is not None:
        frame["request_id"] = request_id
    if frame_type is not None:
        frame["frame_type"] = frame_type
    return frame


def app_server_info_response(
    request_id: str | None,
    *,
    workspace_sandbox: bool = False,
    families: Mapping[str, bool] | None = None,
    requests: Sequence[str] = (),
) -> dict[str, Any]:
    """`families`: the request families' capabilities (server/requests.py says which exist);
    `requests`: every request type answered, for clients that check one by one."""
    return {
        "type": "app_server_info_response",
        "request_id": request_id,
        "success": True,
        "backend": "local",
        "letta_code_version": __version__,
        "protocol_version": PROTOCOL_VERSION,
        "capabilities": {
            "agent_management": False,
            "conversation_management": False,
            "memory_management": False,
            **(families or {}),
            "runtime_start": True,
            "runtime_workspace_sandbox": workspace_sandbox,
            "runtime_external_tools_update": True,
            "split_channels": False,
        },
        "requests": list(requests),
    }


def runtime_start_failed(request_id: str, error: str) -> dict[str, Any]:
    return {
        "type": "runtime_start_response",
        "request_id": request_id,
        "success": False,
        "runtime": None,
        "agent": None,
        "conversation": None,
        "created": {"agent": False, "conversation": False},
        "error": error,
    }


def runtime_replay(
    scope: RuntimeScope,
    after_event_seq: int,
    replayed: Sequence[Mapping[str, Any]],
    missing_through: int | None,
) -> dict[str, Any]:
    """What a client resuming after `after_event_seq` is about to get: the frames `replayed`
    (first and last seq), and whether anything after its seq is lost: `missing_through` is the
    last seq no longer kept (None: the replay is complete; then re-read the state via `sync`)."""
    seqs = [int(f["event_seq"]) for f in replayed]
    return {
        "type": "runtime_replay",
        "runtime": scope.to_dict(),
        "after_event_seq": after_event_seq,
        "complete": missing_through is None,
        "missing_through": missing_through,
        "replayed": len(seqs),
        "first_event_seq": seqs[0] if seqs else None,
        "through_event_seq": seqs[-1] if seqs else after_event_seq,
        "emitted_at": iso_now(),
    }


def runtime_start_response(
    request_id: str,
    scope: RuntimeScope,
    *,
    model: str,
    tools: Sequence[str],
    workspace_sandbox: bool,
    created_agent: bool,
    created_conversation: bool,
    recovered: Iterable[RecoveredEffect],
    interrupted: Iterable[InterruptedEntry] = (),
) -> dict[str, Any]:
    return {
        "type": "runtime_start_response",
        "request_id": request_id,
        "success": True,
        "runtime": scope.to_dict(),
        "agent": {"id": scope.agent_id, "model": model, "tools": list(tools)},
        "conversation": {"id": scope.conversation_id, "agent_id": scope.agent_id},
        "workspace_sandbox": workspace_sandbox,
        "created": {"agent": created_agent, "conversation": created_conversation},
        "recovered_effects": [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "outcome": r.outcome,
                "output": r.output,
            }
            for r in recovered
        ],
        # Inputs a restart found begun but unfinished: reported, not run again (durable_inputs).
        "interrupted_inputs": [
            {
                "queue_item_id": i.queue_item_id,
                "request_id": i.request_id,
                "idempotency_key": i.idempotency_key,
                "client_message_ids": list(i.client_message_ids),
                "source": i.source,
                "state": "interrupted",
                "reason": i.reason,
            }
            for i in interrupted
        ],
    }


def change_device_state_response(request_id: str, *, applied: bool) -> dict[str, Any]:
    return {
        "type": "change_device_state_response",
        "request_id": request_id,
        "success": True,
        "applied": applied,
    }


def abort_message_response(request_id: str, *, aborted: bool) -> dict[str, Any]:
    return {
        "type": "abort_message_response",
        "request_id": request_id,
        "success": True,
        "aborted": aborted,
    }


def runtime_external_tools_update_response(
    request_id: str | None, tools: Sequence[str]
) -> dict[str, Any]:
    return {
        "type": "runtime_external_tools_update_response",
        "request_id": request_id,
        "success": True,
        "tools": list(tools),
    }


def external_tool_call_request(
    request_id: str,
    scope: RuntimeScope,
    *,
    scope_id: str | None,
    tool_call_id: str,
    tool_name: str,
    args: Mapping[str, Any],
) -> dict[str, Any]:
    """A call of a client-registered tool, for the client serving it to run."""
    return {
        "type": "external_tool_call_request",
        "request_id": request_id,
        "runtime": scope.to_dict(),
        "scope_id": scope_id,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "input": dict(args),
        "emitted_at": iso_now(),
    }


def crons_updated(agent_id: str | None = None, conversation_id: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "crons_updated"}
    if agent_id is not None:  # a request changed one agent's tasks (the scheduler sends none)
        frame.update(timestamp=_now_ms(), agent_id=agent_id, conversation_id=conversation_id)
    return frame


# --- the request families (server/requests.py): `<name>_response` and `*_updated` ---------------

UPDATED = ("agent_updated", "conversation_updated", "memory_updated", "skills_updated",
           "channels_updated", "channel_accounts_updated", "channel_pairings_updated",
           "channel_routes_updated", "channel_targets_updated")


def request_response(kind: str, request_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": f"{kind}_response", "request_id": request_id, "success": True, **payload}


def file_ops(path: str, content: str) -> dict[str, Any]:
    """The reference's `file_ops` a server sends after it edited a file (`edit_file`): no ops,
    the whole new document, so the client's editor shows it."""
    return {"type": "file_ops", "path": path, "cg_entries": [], "ops": [], "source": "agent",
            "document_content": content}


def request_failed(
    kind: str, request_id: str | None, error: str, payload: Mapping[str, Any]
) -> dict[str, Any]:
    """A request that could not be done: its response with `success: false`, the fields its
    success would carry set empty (`payload`), and `error`."""
    return {
        "type": f"{kind}_response", "request_id": request_id, "success": False, **payload,
        "error": error,
    }


def terminal_spawned(terminal_id: str, pid: int) -> dict[str, Any]:
    return {"type": "terminal_spawned", "terminal_id": terminal_id, "pid": pid}


def terminal_output(terminal_id: str, data: str) -> dict[str, Any]:
    return {"type": "terminal_output", "terminal_id": terminal_id, "data": data}


def terminal_exited(terminal_id: str, exit_code: int, error: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "terminal_exited", "terminal_id": terminal_id,
                             "exitCode": exit_code}
    if error is not None:
        frame["error"] = error
    return frame


def state_updated(kind: str, **fields: Any) -> dict[str, Any]:
    """`agent_updated`, `conversation_updated`, `memory_updated` or `skills_updated`, sent to
    every connection whose token may see what changed."""
    if kind not in UPDATED:
        raise ValueError(f"not a v2 update notification: {kind}")
    return {"type": kind, **fields, "timestamp": _now_ms()}


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


# --- one runtime's frames ---------------------------------------------------------------------


# The `execute_command` ids this server runs (server/requests_commands.py), advertised in
# every `update_device_status`.
SUPPORTED_COMMANDS = ("clear", "compact", "reload", "remember", "toolset")


class EventStream:
    """Envelopes for one runtime's frames: a shared, monotonic `event_seq` for every subscriber."""

    def __init__(self, scope: RuntimeScope, instance: str) -> None:
        self.scope = scope
        self.instance = instance  # keeps idempotency keys unique across server restarts
        self.envelope = wire.Envelope(scope.agent_id, scope.conversation_id)
        self._seq = itertools.count(1)
        self.last_seq = 0

    def resume_after(self, seq: int) -> None:
        """Go on from `seq` (a runtime rebuilt after its release): keys stay unique."""
        self._seq = itertools.count(seq + 1)
        self.last_seq = seq

    def _frame(self, kind: str, **fields: Any) -> dict[str, Any]:
        """The envelope around one of the frames the builders below make."""
        self.last_seq = seq = next(self._seq)
        return {
            "type": kind,
            **fields,
            "runtime": self.scope.to_dict(),
            "event_seq": seq,
            "emitted_at": iso_now(),
            "idempotency_key": f"{self.instance}:{self.scope.conversation_id}:{seq}",
        }

    # --- state -------------------------------------------------------------------------------

    def device_status(
        self,
        *,
        is_processing: bool,
        permission_mode: str,
        cwd: str,
        loaded_tools: Sequence[str],
        mcp_servers: Sequence[Mapping[str, Any]],
        pending_control_requests: Iterable[tuple[str, Mapping[str, Any]]],
        toolset: str = "default",
        toolset_preference: str = "auto",
        memory_directory: str | None = None,
        reflection_settings: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`update_device_status`; `permission_mode` is tether's name, sent as v2 names it."""
        return self._frame(
            "update_device_status",
            device_status={
                "current_connection_id": None,
                "connection_name": None,
                "is_online": True,
                "is_processing": is_processing,
                "current_permission_mode": WIRE_MODES.get(permission_mode, permission_mode),
                "current_working_directory": cwd,
                "git_context": None,
                "letta_code_version": __version__,
                "current_toolset": toolset,
                "current_toolset_preference": toolset_preference,
                "current_loaded_tools": list(loaded_tools),
                "mcp_servers": list(mcp_servers),
                "current_available_skills": [],
                "background_processes": [],
                "pending_control_requests": [
                    {"request_id": rid, "request": request}
                    for rid, request in pending_control_requests
                ],
                "experiments": [],  # tether has none (requests_unsupported.py)
                "memory_directory": memory_directory,
                "reflection_settings": dict(reflection_settings) if reflection_settings else None,
                "supported_commands": list(SUPPORTED_COMMANDS),
            },
        )

    def loop_status(
        self, status: str, active_run_ids: Iterable[str], executing: Iterable[str]
    ) -> dict[str, Any]:
        return self._frame(
            "update_loop_status",
            loop_status={
                "status": status,
                "active_run_ids": list(active_run_ids),
                "executing_tool_call_ids": list(executing),
            },
        )

    def update_queue(
        self, waiting: Iterable[QueueEntry], removed: Sequence[str] | None = None
    ) -> dict[str, Any]:
        return self._frame(
            "update_queue", queue=[queue_item(q) for q in waiting], removed=list(removed or [])
        )

    # --- input and turns -------------------------------------------------------------------------

    def input_accepted(self, request_id: str, answer: InputAnswer) -> dict[str, Any]:
        return self._frame("input_accepted", request_id=request_id, **answer.fields())

    def control_request(self, request_id: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """A question to the runtime's clients (`can_use_tool`), the stream-json request shape."""
        return self._frame(
            "control_request",
            request_id=request_id,
            request=request,
            agent_id=self.scope.agent_id,
            conversation_id=self.scope.conversation_id,
        )

    def turn_finished(self, finished: TurnFinished) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "turn_id": finished.turn_id,
            "stop_reason": finished.stop_reason,
            "run_id": finished.run_ids[-1] if finished.run_ids else None,
            "run_ids": list(finished.run_ids),
            "request_id": finished.request_id,
        }
        if finished.error is not None:
            fields["error"] = finished.error
        return self._frame("turn_finished", **fields)

    def stream_delta(self, event: TurnEvent) -> dict[str, Any] | None:
        """A turn event as a `stream_delta` frame, or None for what headless drops too."""
        delta = self.delta(event)
        return None if delta is None else self._frame("stream_delta", delta=delta)

    def delta_frame(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        """A `stream_delta` around a delta built elsewhere (`slash_command_start` / `_end`)."""
        return self._frame("stream_delta", delta=dict(delta))

    def turn_failed(self, turn_id: str, message: str) -> dict[str, Any]:
        """The `loop_error` of a turn that could not run at all (busy, damaged, a bug)."""
        delta = {
            "message_type": "loop_error",
            "id": f"loop-error-{turn_id}",
            "message": message,
            "stop_reason": "error",
            "is_terminal": True,
        }
        return self._frame("stream_delta", delta=delta)

    def tool_lifecycle(
        self, message_type: str, tool_call_id: str, run_id: str | None
    ) -> dict[str, Any]:
        """`client_tool_start` / `client_tool_end` of a tool the runtime executes."""
        return self._frame("stream_delta", delta=self._lifecycle(message_type, tool_call_id, run_id))

    # --- deltas ---------------------------------------------------------------------------------

    def delta(self, event: TurnEvent) -> dict[str, Any] | None:
        """The stream_delta payload for one turn event, or None for what headless drops too."""
        env = self.envelope
        if isinstance(event, LocalToolCall):
            return wire.tool_call_event(env, event)
        if isinstance(event, LocalToolReturn):
            return wire.tool_return_event(env, event)
        if isinstance(event, TurnError):
            delta: dict[str, Any] = {
                "message_type": "loop_error",
                "id": f"loop-error-{uuid.uuid4().hex[:12]}",
                "date": iso_now(),
                "message": event.message,
                "stop_reason": event.stop_reason,
                "is_terminal": True,
            }
            if event.run_id:
                delta["run_id"] = event.run_id
            if event.provider_error is not None:
                delta["api_error"] = wire.api_error(event.provider_error)
            return delta
        if isinstance(event, RetryNotice):
            retry: dict[str, Any] = {
                "message_type": "retry",
                "id": f"retry-{uuid.uuid4().hex[:12]}",
                "date": iso_now(),
                "message": event.message,
                "reason": "llm_api_error",
                "attempt": event.attempt,
                "max_attempts": event.max_attempts,
                "delay_ms": event.delay_ms,
            }
            if event.run_id:
                retry["run_id"] = event.run_id
            return retry
        if isinstance(event, ToolCallRequest | ErrorChunk):
            return None  # approvals go out as control_request; errors as loop_error
        return wire.chunk_event(env, event, partial=False)

    def _lifecycle(
        self, message_type: str, tool_call_id: str, run_id: str | None, **extra: Any
    ) -> dict[str, Any]:
        delta: dict[str, Any] = {
            "message_type": message_type,
            "id": f"{message_type}-{tool_call_id}",
            "date": iso_now(),
            "tool_call_id": tool_call_id,
            **extra,
        }
        if run_id:
            delta["run_id"] = run_id
        return delta


def queue_item(entry: QueueEntry) -> dict[str, Any]:
    """One waiting input as `update_queue` lists it (several messages: their contents)."""
    first = entry.messages[0]
    content = first.content if len(entry.messages) == 1 else [m.content for m in entry.messages]
    return {
        "id": entry.id,
        "client_message_id": first.client_message_id,
        "kind": "cron_prompt" if entry.source == "cron" else "message",
        "source": entry.source,
        "content": content,
        "enqueued_at": entry.enqueued_at,
    }
