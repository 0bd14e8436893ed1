"""write_stdin carries no command: `decide()` judges it by how its exec_command session was
admitted (`Call.session`). Admitted sessions are written to without asking, confined ones stay
confined, an unknown session is an error; deny and alwaysAsk rules and strict mode still bind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.permissions import Call, Policy, RuleSet, Scope, decide
from tether.core.permissions.checker import SESSION_ALLOWED, SESSION_CONFINED, SESSION_UNKNOWN
from tether.core.permissions.rules import parse_rule

SCOPE = Scope.of(Path("/w"), Path("/home/u"))
MODES = ("standard", "acceptEdits", "unrestricted")


def judge(session: str | None, mode: str = "standard", **rules: str) -> tuple[str, bool, str]:
    ruleset = RuleSet(**{k: (parse_rule(v),) for k, v in rules.items()})
    call = Call("write_stdin", {"session_id": 3, "chars": "ls\n"}, session=session)
    d = decide(call, Policy(mode, ruleset, SCOPE))
    return d.verdict, d.confine, d.reason


@pytest.mark.parametrize("mode", MODES)
def test_an_admitted_session_is_written_to_without_asking(mode: str) -> None:
    verdict, confine, reason = judge(SESSION_ALLOWED, mode)
    assert (verdict, confine) == ("allow", False) and "session 3" in reason


@pytest.mark.parametrize("mode", MODES)
def test_a_confined_session_stays_confined(mode: str) -> None:
    assert judge(SESSION_CONFINED, mode)[:2] == ("allow", True)


@pytest.mark.parametrize("mode", (*MODES, "strict"))
@pytest.mark.parametrize("session", (SESSION_UNKNOWN, "", "allowed ", "bogus"))
def test_an_unknown_session_is_an_error(mode: str, session: str) -> None:
    verdict, _, reason = judge(session, mode)
    assert verdict == "deny" and "No running exec_command session 3" in reason


@pytest.mark.parametrize(("kind", "rule", "expected"), [
    ("deny", "Bash", "deny"),
    ("cli_deny", "write_stdin", "deny"),
    ("always_ask", "Bash", "ask"),
])
def test_deny_and_always_ask_rules_still_bind(kind: str, rule: str, expected: str) -> None:
    for mode in MODES:
        assert judge(SESSION_ALLOWED, mode, **{kind: rule})[0] == expected


def test_strict_asks_unless_a_rule_admits_the_tool() -> None:
    assert judge(SESSION_ALLOWED, "strict")[0] == "ask"
    assert judge(SESSION_CONFINED, "strict")[0] == "ask"
    assert judge(SESSION_ALLOWED, "strict", allow="Bash")[0] == "allow"


def test_without_a_session_write_stdin_asks_as_before() -> None:
    assert judge(None)[0] == "ask"


def test_the_session_field_is_ignored_for_other_tools() -> None:
    """Only a shell-family call without a command is judged by its session."""
    read = decide(Call("Read", {"file_path": "/etc/shadow"}, paths=("/etc/shadow",),
                       session=SESSION_ALLOWED), Policy("standard", RuleSet(), SCOPE))
    assert read.verdict == "ask"
    bash = decide(Call("Bash", {"command": "rm -rf /"}, command="rm -rf /", session=SESSION_ALLOWED),
                  Policy("standard", RuleSet(), SCOPE))
    assert bash.verdict == "ask"
