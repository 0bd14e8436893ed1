"""write_stdin carries no command: `decide()` judges it by its exec_command session (`Call.session`,
`Call.session_start`). Confined sessions stay confined; input to any other session is a new
command: admitted where the session's admission covers any command (unrestricted, a rule for
every shell command, a person's approval), asked where a narrow rule admitted only the first
command or deny rules could be dodged, denied where the input read as a command meets a deny
rule. Polling and Ctrl-C inherit; an unknown session is an error; deny and alwaysAsk rules and
strict mode still bind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.permissions import Call, Policy, RuleSet, Scope, decide
from tether.core.permissions.checker import SESSION_ALLOWED, SESSION_CONFINED, SESSION_UNKNOWN
from tether.core.permissions.rules import parse_rule

SCOPE = Scope.of(Path("/w"), Path("/home/u"))
MODES = ("standard", "acceptEdits", "unrestricted")


def judge(session: str | None, mode: str = "standard", chars: str = "ls\n",
          start: str | None = "python3 -q", **rules: str) -> tuple[str, bool, str]:
    ruleset = RuleSet(**{k: (parse_rule(v),) for k, v in rules.items()})
    call = Call("write_stdin", {"session_id": 3, "chars": chars}, session=session,
                session_start=(start, Path("/w")) if start is not None else None)
    d = decide(call, Policy(mode, ruleset, SCOPE))
    return d.verdict, d.confine, d.reason


@pytest.mark.parametrize("mode", MODES)
def test_a_session_admitted_for_any_command_is_written_to_without_asking(mode: str) -> None:
    rule = {} if mode == "unrestricted" else {"allow": "Bash"}
    verdict, confine, reason = judge(SESSION_ALLOWED, mode, **rule)
    assert (verdict, confine) == ("allow", False) and "session 3" in reason
    # a person approved it (its start asks now): the same
    assert judge(SESSION_ALLOWED, mode, start="python3 -q")[0] == ("allow" if mode == "unrestricted" else "allow")


@pytest.mark.parametrize("start", ["git log", "python3 -q", "ed notes.md"])
@pytest.mark.parametrize("chars", ["!touch x\n", "import os\n", "y\n", "q"])
def test_a_session_a_narrow_rule_admitted_asks_for_input(start: str, chars: str) -> None:
    head = " ".join(start.split()[:1])
    for mode in ("standard", "acceptEdits"):
        verdict, _, reason = judge(SESSION_ALLOWED, mode, chars=chars, start=start,
                                   allow=f"Bash({head}:*)")
        assert verdict == "ask" and "admitted as a command" in reason, (mode, reason)


@pytest.mark.parametrize("chars", ["", "\u0003", "\u0004", "\u0003\u0003"])
def test_polling_and_interrupts_inherit(chars: str) -> None:
    assert judge(SESSION_ALLOWED, chars=chars, start="git log", allow="Bash(git log:*)")[0] == "allow"


@pytest.mark.parametrize("mode", MODES)
def test_deny_rules_the_input_could_dodge_make_it_ask(mode: str) -> None:
    for deny in ("Bash(rm:*)", "Read(.env)"):
        verdict, _, reason = judge(SESSION_ALLOWED, mode, chars="print(1)\n", allow="Bash", deny=deny)
        assert verdict == "ask" and "deny rules" in reason, reason


@pytest.mark.parametrize("chars", ["rm -rf x\n", "!rm -rf x\n", "ls; rm x\n"])
def test_input_that_reads_as_a_denied_command_is_denied(chars: str) -> None:
    for mode in MODES:
        verdict, _, reason = judge(SESSION_ALLOWED, mode, chars=chars, allow="Bash", deny="Bash(rm:*)")
        assert verdict == "deny" and "read as a command" in reason, reason


def test_a_session_whose_first_command_is_denied_now_takes_no_input() -> None:
    verdict, _, _ = judge(SESSION_ALLOWED, chars="x\n", start="ed f", allow="Bash(ed:*)", cli_deny="Bash(ed:*)")
    assert verdict == "deny"


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
