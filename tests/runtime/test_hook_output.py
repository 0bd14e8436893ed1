"""Claude Code's hook JSON read into decisions; malformed decision JSON is an error, never an allow."""

from __future__ import annotations

import json

import pytest

from tether.runtime.extensions.hook_output import HookOutputError, parse_hook_output
from tether.runtime.extensions.hooks import command_result


@pytest.mark.parametrize(
    ("event", "doc", "decision", "verdict"),
    [
        ("PreToolUse", {"hookSpecificOutput": {"permissionDecision": "deny",
                                               "permissionDecisionReason": "r"}}, "block", "deny"),
        ("PreToolUse", {"hookSpecificOutput": {"permissionDecision": "allow"}}, "allow", "allow"),
        ("PreToolUse", {"hookSpecificOutput": {"permissionDecision": "ask"}}, "allow", "ask"),
        ("PreToolUse", {"decision": "block", "reason": "r"}, "block", "deny"),
        ("PreToolUse", {"decision": "approve"}, "allow", None),
        ("PermissionRequest", {"hookSpecificOutput": {"decision": {"behavior": "allow"}}}, "allow", "allow"),
        ("PermissionRequest", {"hookSpecificOutput": {"decision": {"behavior": "deny", "message": "r"}}},
         "block", "deny"),
        ("PostToolUse", {"decision": "block", "reason": "r"}, "block", "deny"),
        ("Stop", {"decision": "block", "reason": "r"}, "block", "deny"),
        ("UserPromptSubmit", {"decision": "block", "reason": "r"}, "block", "deny"),
        ("PostToolUse", {"suppressOutput": True, "systemMessage": "hi"}, "allow", None),
    ],
)
def test_json_decisions_on_exit_0(event: str, doc: dict, decision: str, verdict: str | None) -> None:
    result = command_result("hook.sh", event, 0, json.dumps(doc), "")
    assert (result.decision, result.output.verdict) == (decision, verdict)
    if decision == "block":
        assert result.feedback == "[hook.sh]: r"


@pytest.mark.parametrize(
    ("event", "stdout"),
    [
        ("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "deny"'),
        ("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "no"}}'),
        ("PreToolUse", '{"hookSpecificOutput": "deny"}'),
        ("PreToolUse", '{"continue": "no"}'),
        ("PreToolUse", '{"decision": "deny"}'),
        ("PreToolUse", '{"hookSpecificOutput": {"hookEventName": "PostToolUse"}}'),
        ("PreToolUse", '{"hookSpecificOutput": {"updatedInput": "rm -rf /"}}'),
        ("PermissionRequest", '{"hookSpecificOutput": {"decision": {"behavior": "yes"}}}'),
        ("PermissionRequest", '{"hookSpecificOutput": {"decision": "allow"}}'),
        ("PostToolUse", '{"hookSpecificOutput": {"additionalContext": 3}}'),
    ],
)
def test_malformed_decision_json_is_an_error(event: str, stdout: str) -> None:
    assert command_result("hook.sh", event, 0, stdout, "").decision == "error"
    with pytest.raises(HookOutputError):
        parse_hook_output(stdout, event)


def test_exit_codes_keep_the_reference_meaning_without_json() -> None:
    assert command_result("h", "PreToolUse", 0, "plain words", "").decision == "allow"
    assert command_result("h", "PreToolUse", 2, "", "no").decision == "block"
    assert command_result("h", "PreToolUse", 1, '{"decision": "approve"}', "").decision == "error"
    assert command_result("h", "UserPromptSubmit", 0, "ctx", "").context == "ctx"


def test_continue_false_carries_its_stop_reason_and_json_is_not_context() -> None:
    result = command_result("h", "UserPromptSubmit", 0, '{"continue": false, "stopReason": "bye"}', "")
    assert result.output.stop_reason == "bye" and result.context == ""
    result = command_result("h", "SessionStart", 0,
                            '{"hookSpecificOutput": {"additionalContext": "today is Friday"}}', "")
    assert result.context == "today is Friday"
