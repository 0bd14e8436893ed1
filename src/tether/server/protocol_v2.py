"""Protocol v2 frames clients send (reference §12.3), parsed into typed commands.

Parsing is strict where bytes come in: a frame that is not JSON, has an unknown `type` or lacks a
field becomes a `FrameError` naming the field; the connection stays up. What the server sends is
built in `v2_frames.py`.

Beyond the reference (tether extensions, `EXTENSION_FIELDS`):

- `runtime_start{after_event_seq}`: a non-negative integer, the last `event_seq` this client saw
  of the runtime (e.g. before its worker died); anything else is a `FrameError` naming
  `after_event_seq`. After the `runtime_start_response` and its state frames, the server sends
  `runtime_replay{after_event_seq, complete, missing_through, replayed, first_event_seq,
  through_event_seq}`, then every frame of the runtime after that seq it can still replay,
  unchanged (their own `event_seq`), then the live ones: none missing, none twice
  (`server/event_replay.py`). With `--store` they come from the `fleet_events` rows, kept
  `KEEP_S`; `complete: false` with `missing_through` says the frames up to that seq are no
  longer kept (or, on a server without `--store`, were never kept): re-read the state with
  `sync`.
- `sync{after_event_seq}`: the same, for a client already on the runtime (e.g. one that saw a
  gap in the seqs): after the state frames `sync` sends, `runtime_replay` and the frames after
  that seq, then the live ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from tether.protocol.messages import ImagePart, TextPart, UserPart
from tether.server.external_tools import (
    ExternalToolCallResponse,
    ExternalToolSpec,
    ExternalToolsUpdate,
    parse_call_response,
    parse_external_tools,
    parse_tools_update,
)
from tether.server.frame_reader import (
    DECISION_FIELDS,
    FIELDS,
    PAYLOAD_FIELDS,
    SANDBOX_FIELDS,
    UNSUPPORTED,
    FrameError,
    Reader,
)
from tether.server.request_kit import RequestFrame

# --- client → server ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuntimeScope:
    agent_id: str
    conversation_id: str

    def to_dict(self) -> dict[str, str]:
        return {"agent_id": self.agent_id, "conversation_id": self.conversation_id}


@dataclass(frozen=True, slots=True)
class AppServerInfo:
    request_id: str


@dataclass(frozen=True, slots=True)
class RuntimeStart:
    request_id: str
    agent_id: str | None
    create_agent: dict[str, Any] | None
    conversation_id: str | None
    create_conversation: dict[str, Any] | None
    cwd: str | None
    mode: str | None
    workspace_sandbox: bool = False  # run the conversation's shell commands in the sandbox
    sandbox_root: str | None = None  # `workspace_sandbox.root` as sent (must be the cwd)
    external_tools: tuple[ExternalToolSpec, ...] = ()  # client-executed tools (MessageChannel)
    after_event_seq: int | None = None  # resume after this seq (an extension: module docstring)


@dataclass(frozen=True, slots=True)
class NewMessage:
    client_message_id: str
    parts: tuple[UserPart, ...]
    content: Any  # as the client sent it, echoed in update_queue


@dataclass(frozen=True, slots=True)
class CreateMessage:
    request_id: str | None
    idempotency_key: str | None  # the client's key, else its request_id
    runtime: RuntimeScope
    messages: tuple[NewMessage, ...]
    # The key is the sender's own `idempotency_key` (kept across server restarts by the durable
    # queue), not a request_id standing in for one (remembered by this process only: a client
    # may number its requests afresh after a restart).
    key_given: bool = True


@dataclass(frozen=True, slots=True)
class ApprovalResponse:
    request_id: str | None
    runtime: RuntimeScope
    approval_request_id: str
    allow: bool
    message: str
    updated_input: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ChangeDeviceState:
    request_id: str | None
    runtime: RuntimeScope
    mode: str | None
    cwd: str | None


@dataclass(frozen=True, slots=True)
class AbortMessage:
    request_id: str | None
    runtime: RuntimeScope
    run_id: str | None


@dataclass(frozen=True, slots=True)
class Sync:
    request_id: str | None
    runtime: RuntimeScope
    after_event_seq: int | None = None  # replay after this seq (an extension: module docstring)


ClientFrame = (
    AppServerInfo
    | RuntimeStart
    | CreateMessage
    | ApprovalResponse
    | ChangeDeviceState
    | AbortMessage
    | Sync
    | ExternalToolCallResponse
    | ExternalToolsUpdate
    | RequestFrame
)
FRAME_TYPES = (
    "app_server_info",
    "runtime_start",
    "input",
    "change_device_state",
    "abort_message",
    "sync",
    "external_tool_call_response",
    "runtime_external_tools_update",
)
# Fields tether accepts beyond the reference's (the module docstring says what each does).
EXTENSION_FIELDS: dict[str, frozenset[str]] = {
    "runtime_start": frozenset({"after_event_seq"}),
    "sync": frozenset({"after_event_seq"}),
}


def parse_frame(raw: str | bytes) -> ClientFrame:
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"frame is not valid JSON ({exc})") from None
    if not isinstance(msg, dict):
        raise FrameError(f"frame must be a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    rid = msg.get("request_id")
    request_id = rid if isinstance(rid, str) else None
    if not isinstance(kind, str):
        raise FrameError("frame needs a string 'type'", request_id=request_id)
    reader = Reader(msg, kind, request_id)
    if rid is not None and request_id is None:
        raise reader.fail("request_id", "must be a string")
    if kind in FIELDS:
        reader.known(FIELDS[kind] | EXTENSION_FIELDS.get(kind, frozenset()))
    if kind == "app_server_info":
        return AppServerInfo(reader.required_str("request_id"))
    if kind == "runtime_start":
        return _runtime_start(reader)
    if kind == "input":
        return _input(reader)
    if kind == "change_device_state":
        return _change_device_state(reader)
    if kind == "abort_message":
        return AbortMessage(request_id, RuntimeScope(*reader.runtime()), reader.opt_str("run_id"))
    if kind == "sync":
        return Sync(request_id, RuntimeScope(*reader.runtime()), _after_event_seq(reader))
    if kind == "external_tool_call_response":
        return parse_call_response(reader)
    if kind == "runtime_external_tools_update":
        return parse_tools_update(reader)
    from tether.server.requests import REQUESTS, parse_request

    found = parse_request(kind, msg, request_id)
    if found is not None:
        return found
    raise FrameError(
        f"unknown frame type {kind!r}; this server accepts: "
        f"{', '.join((*FRAME_TYPES, *REQUESTS))}",
        request_id=request_id,
        frame_type=kind,
    )


def _change_device_state(r: Reader) -> ChangeDeviceState:
    """`{runtime?, payload?{mode, cwd, agent_id, conversation_id}}`, the four fields also at top
    level (older clients): one value per field, and the runtime named by `runtime` or by
    `agent_id` + `conversation_id` (null: the agent's default conversation), never both
    differently."""
    payload = r.obj("payload") or {}
    sub = Reader(payload, r.kind, r.request_id, "payload.")
    sub.known(PAYLOAD_FIELDS["change_device_state"])
    values: dict[str, str | None] = {}
    for name in ("mode", "cwd", "agent_id", "conversation_id"):
        top, inner = r.opt_str(name), sub.opt_str(name)
        if top is not None and inner is not None and top != inner:
            raise r.fail(name, f"is given twice with different values ({top!r}, payload {inner!r})")
        values[name] = inner if inner is not None else top
    named = None
    if values["agent_id"] is not None:
        named = RuntimeScope(values["agent_id"], values["conversation_id"] or "default")
    elif values["conversation_id"] is not None:
        raise sub.fail("agent_id", "is required with conversation_id")
    if "runtime" in r.msg:
        scope = RuntimeScope(*r.runtime())
        conversation = values["conversation_id"]
        if named is not None and (
            named.agent_id != scope.agent_id
            or conversation not in (None, scope.conversation_id)
        ):
            raise sub.fail(
                "agent_id",
                f"names {named.agent_id}/{named.conversation_id}, not the frame's runtime "
                f"{scope.agent_id}/{scope.conversation_id}",
            )
    elif named is not None:
        scope = named
    else:
        raise r.fail("runtime", "is required (or payload.agent_id and payload.conversation_id)")
    return ChangeDeviceState(r.request_id, scope, values["mode"], values["cwd"])


def _runtime_start(r: Reader) -> RuntimeStart:
    request_id = r.required_str("request_id")
    agent_id, create_agent = r.opt_str("agent_id"), r.obj("create_agent")
    if (agent_id is None) == (create_agent is None):
        raise r.fail("agent_id", "give exactly one of 'agent_id' or 'create_agent'")
    conversation_id, create_conversation = (
        r.opt_str("conversation_id"),
        r.obj("create_conversation"),
    )
    if conversation_id is not None and create_conversation is not None:
        raise r.fail(
            "conversation_id", "give at most one of 'conversation_id' or 'create_conversation'"
        )
    if create_conversation is not None and agent_id is None and create_agent is None:
        raise r.fail("create_conversation", "needs an agent")
    r.unsupported(UNSUPPORTED["runtime_start"])
    for flag in ("recover_approvals", "force_device_status", "wait_for_replay"):
        if r.msg.get(flag) is not None and not isinstance(r.msg[flag], bool):
            raise r.fail(flag, "must be true or false")
    sandbox, root = _workspace_sandbox(r)
    return RuntimeStart(
        request_id,
        agent_id,
        create_agent,
        conversation_id,
        create_conversation,
        r.opt_str("cwd"),
        r.opt_str("mode"),
        sandbox,
        root,
        parse_external_tools(r),
        _after_event_seq(r),
    )


def _after_event_seq(r: Reader) -> int | None:
    value = r.msg.get("after_event_seq")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise r.fail(
            "after_event_seq",
            f"must be a non-negative integer (the last event_seq this client saw), got {value!r}",
        )
    return value


def _workspace_sandbox(r: Reader) -> tuple[bool, str | None]:
    """`workspace_sandbox`: true / false, or the reference's object `{root, isolation_root}`
    (asking for it). `isolation_root` (a separate copy of the workspace) is not supported."""
    value = r.msg.get("workspace_sandbox")
    if value is None or isinstance(value, bool):
        return bool(value), None
    if not isinstance(value, dict):
        raise r.fail("workspace_sandbox", "must be true, false or an object {root}")
    sub = Reader(value, r.kind, r.request_id, "workspace_sandbox.")
    sub.known(SANDBOX_FIELDS)
    if sub.opt_str("isolation_root") is not None:
        raise sub.fail(
            "isolation_root", "is not supported by this server (it sandboxes the cwd in place)"
        )
    return True, sub.opt_str("root")


def _input(r: Reader) -> CreateMessage | ApprovalResponse:
    runtime = RuntimeScope(*r.runtime())
    payload = r.obj("payload", required=True)
    assert payload is not None
    p = Reader(payload, "input", r.request_id, "payload.")
    kind = p.required_str("kind")
    if kind in PAYLOAD_FIELDS:
        p.known(PAYLOAD_FIELDS[kind])
    if kind == "create_message":
        p.unsupported(UNSUPPORTED["create_message"])
        mode = payload.get("image_failure_mode")
        if mode is not None and mode not in ("strict", "drop"):
            raise p.fail("image_failure_mode", "must be 'strict' or 'drop'")
        items = payload.get("messages")
        if not isinstance(items, list) or not items:
            raise p.fail("messages", "must be a non-empty list of messages")
        messages = tuple(_message(p, item, n) for n, item in enumerate(items))
        given = r.opt_str("idempotency_key")
        key = given or r.request_id
        return CreateMessage(r.request_id, key, runtime, messages, key_given=given is not None)
    if kind == "approval_response":
        approval_id = p.required_str("request_id")
        if "error" in payload:
            return ApprovalResponse(
                r.request_id, runtime, approval_id, False, str(payload["error"]), None
            )
        decision = p.obj("decision", required=True)
        assert decision is not None
        d = Reader(decision, "input", r.request_id, "payload.decision.")
        d.known(DECISION_FIELDS)
        d.unsupported(UNSUPPORTED["decision"])
        behavior = d.required_str("behavior")
        if behavior == "allow":
            updated = decision.get("updated_input")
            if updated is not None and not isinstance(updated, dict):
                raise d.fail("updated_input", "must be an object or null")
            return ApprovalResponse(
                r.request_id, runtime, approval_id, True, d.opt_str("message") or "", updated
            )
        if behavior == "deny":
            message = d.opt_str("message") or "Denied by the client"
            return ApprovalResponse(r.request_id, runtime, approval_id, False, message, None)
        raise d.fail("behavior", "must be 'allow' or 'deny'")
    raise p.fail("kind", "must be 'create_message' or 'approval_response'")


def _message(p: Reader, item: Any, n: int) -> NewMessage:
    where = f"messages[{n}]"
    if not isinstance(item, dict):
        raise p.fail(where, "must be an object")
    role = item.get("role", "user")
    if role != "user":
        raise p.fail(f"{where}.role", "must be 'user'")
    content = item.get("content")
    parts = user_parts(content)
    if parts is None:
        raise p.fail(f"{where}.content", "must be a string or a list of text/image parts")
    cmid = item.get("client_message_id")
    if cmid is not None and not isinstance(cmid, str):
        raise p.fail(f"{where}.client_message_id", "must be a string")
    return NewMessage(cmid or f"cm-{uuid.uuid4().hex[:12]}", parts, content)


def user_parts(content: Any) -> tuple[UserPart, ...] | None:
    """A Letta MessageCreate content (string, or text / base64 image parts) as message parts."""
    if isinstance(content, str):
        return (TextPart(content),) if content else None
    if not isinstance(content, list):
        return None
    parts: list[UserPart] = []
    for part in content:
        if not isinstance(part, dict):
            return None
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif part.get("type") == "image":
            source = part["source"] if isinstance(part.get("source"), dict) else part
            data, mime = source.get("data"), source.get("media_type") or source.get("mimeType")
            if not (isinstance(data, str) and isinstance(mime, str)):
                return None
            parts.append(ImagePart(data, mime))
        else:
            return None
    return tuple(parts) or None
