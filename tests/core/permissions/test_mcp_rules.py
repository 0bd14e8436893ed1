"""Permission rules for MCP tools: `mcp__<server>` covers the server's tools, no more."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.permissions import Call, Policy, RuleSet, Scope, decide
from tether.core.permissions.rules import parse_rule

SCOPE = Scope.of(Path("/w"), Path("/home/u"))


def verdict(tool: str, *, deny: str | None = None, allow: str | None = None,
            mode: str = "standard", hint: bool = False) -> str:
    rules = RuleSet(deny=(parse_rule(deny),) if deny else (), allow=(parse_rule(allow),) if allow else ())
    return decide(Call(tool, read_only_hint=hint), Policy(mode, rules, SCOPE)).verdict


@pytest.mark.parametrize(("rule", "tool", "covered"), [
    ("mcp__git", "mcp__git__git_status", True),
    ("mcp__git", "mcp__github__list_issues", False),
    ("mcp__git", "mcp__git", True),
    ("mcp__git__git_status", "mcp__git__git_status", True),
    ("mcp__git__git_status", "mcp__git__git_log", False),
])
def test_server_and_tool_rules(rule: str, tool: str, covered: bool) -> None:
    assert (verdict(tool, deny=rule) == "deny") is covered
    assert (verdict(tool, allow=rule) == "allow") is covered
    assert verdict(tool, deny=rule, mode="unrestricted") == ("deny" if covered else "allow")


def test_read_only_hint_allows_but_never_lifts_a_deny_or_strict() -> None:
    assert verdict("mcp__time__now") == "ask"
    assert verdict("mcp__time__now", hint=True) == "allow"
    assert verdict("mcp__time__now", hint=True, deny="mcp__time") == "deny"
    assert verdict("mcp__time__now", hint=True, mode="strict") == "ask"


@pytest.mark.parametrize(("rule", "tool", "server", "covered"), [
    ("mcp__git", "mcp__git__evil__x", "git__evil", False),  # server `git__evil` is not `git`
    ("mcp__git", "mcp__git__evil__x", "git", True),  # tool `evil__x` of server `git`
    ("mcp__git__evil", "mcp__git__evil__x", "git__evil", True),
    ("mcp__evil", "mcp__Evil__x", "Evil", True),
    ("mcp__EVIL__X", "mcp__Evil__x", "Evil", True),
    ("mcp__git", "mcp__gitx__y", "gitx", False),
    ("mcp__git", "mcp__git_evil__y", "git_evil", False),
])
def test_rules_match_whole_normalised_names(rule: str, tool: str, server: str, covered: bool) -> None:
    for kind, hit in (("deny", "deny"), ("allow", "allow")):
        rules = RuleSet(**{kind: (parse_rule(rule),)})
        got = decide(Call(tool, mcp_server=server), Policy("standard", rules, SCOPE)).verdict
        assert (got == hit) is covered, (kind, rule, tool, server)


def test_without_the_server_a_deny_covers_every_reading_an_allow_none_ambiguous() -> None:
    assert verdict("mcp__git__evil__x", deny="mcp__git") == "deny"
    assert verdict("mcp__git__evil__x", deny="mcp__git__evil") == "deny"
    assert verdict("mcp__git__evil__x", allow="mcp__git") == "ask"
    assert verdict("mcp__git__x", allow="mcp__GIT") == "allow"
    assert verdict("mcp__Evil__x", deny="mcp__evil") == "deny"
