"""Building policies and calls for permission tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tether.core.permissions import Call, Decision, Policy, RuleSet, Scope, decide
from tether.core.permissions.rules import parse_rule


def rules(
    *,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    ask: Sequence[str] = (),
    always_ask: Sequence[str] = (),
    cli_allow: Sequence[str] = (),
    cli_deny: Sequence[str] = (),
    session_allow: Sequence[str] = (),
) -> RuleSet:
    def parsed(texts: Sequence[str]) -> tuple:
        return tuple(parse_rule(t) for t in texts)

    return RuleSet(
        deny=parsed(deny),
        cli_deny=parsed(cli_deny),
        always_ask=parsed(always_ask),
        cli_allow=parsed(cli_allow),
        session_allow=parsed(session_allow),
        allow=parsed(allow),
        ask=parsed(ask),
    )


def policy(cwd: Path, home: Path, ruleset: RuleSet, mode: str = "standard", extra=()) -> Policy:
    return Policy(mode, ruleset, Scope.of(cwd, home, extra))


def shell(pol: Policy, command: str) -> Decision:
    return decide(Call("Bash", {"command": command}, command=command), pol)


def tool(pol: Policy, name: str, *paths: str, **args: object) -> Decision:
    return decide(Call(name, args, paths=tuple(paths)), pol)
