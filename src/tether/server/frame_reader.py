"""Reading client frames field by field (protocol v2): the `FrameError` a bad field becomes,
the fields each frame type may carry, and the `Reader` whose errors name the frame type and
the field's path. A field not listed is an error, never silently ignored."""

from __future__ import annotations

from typing import Any

from tether.errors import ProtocolError


class FrameError(ProtocolError):
    """A client frame the server cannot act on; `str()` says which field and why."""

    def __init__(
        self, message: str, *, request_id: str | None = None, frame_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.frame_type = frame_type


# Every field a client may send, per frame type and nested object (the reference's protocol v2
# names). A name not listed is an error, so a misspelt or new option is never silently ignored.
FIELDS = {
    "app_server_info": {"type", "request_id"},
    "runtime_start": {
        "type", "request_id", "agent_id", "create_agent", "conversation_id",
        "create_conversation", "conversation_source_tags", "cwd", "mode", "workspace_sandbox",
        "skill_sources", "client_info", "recover_approvals", "force_device_status",
        "wait_for_replay", "external_tools",
    },
    "input": {"type", "request_id", "runtime", "payload", "idempotency_key"},
    "change_device_state": {
        "type", "request_id", "runtime", "payload", "mode", "cwd", "agent_id", "conversation_id",
    },
    "abort_message": {"type", "request_id", "runtime", "run_id"},
    "sync": {"type", "request_id", "runtime", "recover_approvals", "force_device_status"},
}
PAYLOAD_FIELDS = {
    "create_message": {
        "kind", "messages", "image_failure_mode", "client_tool_allowlist", "client_toolset",
        "external_tool_scope_ids", "exclude_interactive_tools",
    },
    "approval_response": {"kind", "request_id", "decision", "error"},
    "change_device_state": {"mode", "cwd", "agent_id", "conversation_id"},
}
RUNTIME_FIELDS = {"agent_id", "conversation_id", "acting_user_id"}
DECISION_FIELDS = {"behavior", "message", "updated_input", "selected_permission_suggestion_ids"}
SANDBOX_FIELDS = {"root", "isolation_root"}
# Known options this server does not implement: refused when they ask for something, because
# ignoring them would run the conversation differently from what the client asked.
UNSUPPORTED = {
    "runtime_start": ("skill_sources",),
    "create_message": (
        "client_tool_allowlist", "client_toolset", "external_tool_scope_ids",
        "exclude_interactive_tools",
    ),
    "decision": ("selected_permission_suggestion_ids",),
}


class Reader:
    """Field access that fails with the frame type and the field's path."""

    def __init__(
        self, msg: dict[str, Any], kind: str, request_id: str | None, prefix: str = ""
    ) -> None:
        self.msg, self.kind, self.request_id, self.prefix = msg, kind, request_id, prefix

    def fail(self, field: str, why: str) -> FrameError:
        return FrameError(
            f"{self.kind}: '{self.prefix}{field}' {why}",
            request_id=self.request_id,
            frame_type=self.kind,
        )

    def known(self, fields: set[str]) -> None:
        unknown = sorted(k for k in self.msg if k not in fields)
        if unknown:
            raise self.fail(
                unknown[0],
                f"is not a field of this frame (known: {', '.join(sorted(fields))})",
            )

    def unsupported(self, fields: tuple[str, ...]) -> None:
        for name in fields:
            if self.msg.get(name) not in (None, [], {}, False):
                raise self.fail(name, "is not supported by this server; omit it")

    def required_str(self, field: str) -> str:
        value = self.msg.get(field)
        if not isinstance(value, str) or not value:
            raise self.fail(field, "is required (a non-empty string)")
        return value

    def opt_str(self, field: str) -> str | None:
        value = self.msg.get(field)
        if value is not None and not isinstance(value, str):
            raise self.fail(field, "must be a string")
        return value or None

    def obj(self, field: str, *, required: bool = False) -> dict[str, Any] | None:
        value = self.msg.get(field)
        if value is None and not required:
            return None
        if not isinstance(value, dict):
            raise self.fail(
                field, "is required (an object)" if value is None else "must be an object"
            )
        return value

    def runtime(self) -> tuple[str, str]:
        """(agent_id, conversation_id) of the frame's `runtime` object."""
        scope = self.obj("runtime", required=True)
        assert scope is not None
        sub = Reader(scope, self.kind, self.request_id, f"{self.prefix}runtime.")
        sub.known(RUNTIME_FIELDS)
        return sub.required_str("agent_id"), sub.required_str("conversation_id")
