"""What a command hook's stdout says, read as Claude Code documents it (`SyncHookJSONOutput`).

Exit code 0 with stdout that is a JSON object carries decisions:

    continue: false  (+ stopReason)          stop the session: no more tool calls run
    decision: "block" (+ reason)             PostToolUse / Stop / UserPromptSubmit (and the
                                             older PreToolUse form; "approve" is a no-op)
    suppressOutput, systemMessage            accepted; shown to the user, never to the model
    hookSpecificOutput:
      PreToolUse         permissionDecision allow|deny|ask, permissionDecisionReason,
                         updatedInput, additionalContext
      PermissionRequest  decision {behavior allow|deny, updatedInput, message, interrupt}
      other events       additionalContext

Stdout that is not JSON keeps the reference's meaning (plain text; context for UserPromptSubmit
and SessionStart). Stdout that starts like a JSON object but does not parse, or whose decision
fields have the wrong type or value, is an error: a guard that meant to deny must not be read
as a clean exit 0 that allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

PERMISSION_DECISIONS = ("allow", "deny", "ask")


@dataclass(frozen=True, slots=True)
class HookOutput:
    """The decisions in one hook's stdout (all empty when it printed plain text)."""

    is_json: bool = False
    block_reason: str | None = None  # decision "block", permissionDecision "deny", behavior "deny"
    stop_reason: str | None = None  # continue: false
    verdict: str | None = None  # "allow" | "ask" | "deny" (PreToolUse / PermissionRequest)
    updated_input: dict[str, Any] | None = None
    context: str = ""  # additionalContext
    interrupt: bool = False  # PermissionRequest decision.interrupt
    system_message: str = ""
    suppress_output: bool = False


class HookOutputError(ValueError):
    """The hook printed JSON tether cannot read as Claude Code's hook output."""


def parse_hook_output(stdout: str, event: str) -> HookOutput:
    """The decisions of an exit-0 hook of `event`; HookOutputError when the JSON is malformed."""
    text = stdout.strip()
    if not text.startswith("{"):
        return HookOutput()
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise HookOutputError(f"its output starts like JSON but does not parse ({exc})") from None
    if not isinstance(doc, dict):
        raise HookOutputError("its JSON output is not an object")
    keep_going = doc.get("continue", True)
    if not isinstance(keep_going, bool):
        raise HookOutputError('"continue" must be true or false')
    stop_reason = None
    if keep_going is False:
        stop_reason = _text(doc, "stopReason") or "a hook stopped the session"
    block_reason = None
    verdict = None
    decision = doc.get("decision")
    if decision is not None:
        if decision not in ("block", "approve"):
            raise HookOutputError(f'"decision" must be "block" or "approve", not {decision!r}')
        if decision == "block":
            block_reason = _text(doc, "reason") or "blocked by a hook"
            verdict = "deny"
    specific = doc.get("hookSpecificOutput")
    if specific is not None and not isinstance(specific, dict):
        raise HookOutputError('"hookSpecificOutput" must be an object')
    specific = specific or {}
    named = specific.get("hookEventName")
    if named is not None and named != event:
        raise HookOutputError(f"hookSpecificOutput is for {named!r}, this hook ran for {event!r}")
    updated_input = _object(specific, "updatedInput")
    interrupt = False
    if event == "PreToolUse":
        chosen = specific.get("permissionDecision")
        if chosen is not None:
            if chosen not in PERMISSION_DECISIONS:
                raise HookOutputError(
                    f'permissionDecision must be "allow", "deny" or "ask", not {chosen!r}'
                )
            verdict = "deny" if verdict == "deny" else chosen
            if chosen == "deny":
                block_reason = (block_reason or _text(specific, "permissionDecisionReason")
                                or "denied by a PreToolUse hook")
    elif event == "PermissionRequest":
        behavior_doc = specific.get("decision")
        if behavior_doc is not None:
            if not isinstance(behavior_doc, dict):
                raise HookOutputError("hookSpecificOutput.decision must be an object")
            behavior = behavior_doc.get("behavior")
            if behavior not in ("allow", "deny"):
                raise HookOutputError(
                    f'hookSpecificOutput.decision.behavior must be "allow" or "deny", not {behavior!r}'
                )
            verdict = "deny" if verdict == "deny" else behavior
            updated_input = _object(behavior_doc, "updatedInput")
            interrupt = behavior_doc.get("interrupt") is True
            if behavior == "deny":
                block_reason = (block_reason or _text(behavior_doc, "message")
                                or "denied by a PermissionRequest hook")
    context = specific.get("additionalContext", "")
    if not isinstance(context, str):
        raise HookOutputError("additionalContext must be a string")
    return HookOutput(
        is_json=True, block_reason=block_reason, stop_reason=stop_reason, verdict=verdict,
        updated_input=updated_input, context=context.strip(), interrupt=interrupt,
        system_message=_text(doc, "systemMessage"), suppress_output=doc.get("suppressOutput") is True,
    )


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise HookOutputError(f"{key!r} must be a string")
    return value.strip()


def _object(doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HookOutputError(f"{key!r} must be an object of the tool's arguments")
    return value
