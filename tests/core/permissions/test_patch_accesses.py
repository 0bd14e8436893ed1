"""`Call.accesses`: a call judged on every path under the family of what it does to it (a patch's
move reads and deletes its source, writes its destination), and writes that arm later execution
(`Scope.armed_names`, `Scope.armed_files`) asking in every mode unless a rule names them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tether.core.permissions import Call, Policy, RuleSet, Scope, decide
from tether.core.permissions.rules import parse_rule
from tether.tools.apply_patch import patch_accesses

CWD = Path("/w")
SCOPE = replace(Scope.of(CWD, Path("/home/u")), armed_names=lambda: frozenset({".envrc", ".vscode"}),
                armed_files=(CWD / "scripts" / "fmt.sh",))


def judge(patch: str, mode: str = "acceptEdits", **rules: str) -> str:
    ruleset = RuleSet(**{k: (parse_rule(v),) for k, v in rules.items()})
    body = "\n".join(["*** Begin Patch", *patch.split("|"), "*** End Patch"])
    accesses = tuple((f, str(p)) for f, p in patch_accesses({"input": body}, CWD))
    return decide(Call("ApplyPatch", {"input": body}, accesses=accesses), Policy(mode, ruleset, SCOPE)).verdict


def test_every_access_is_listed() -> None:
    body = "*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** Add File: c\n+x\n*** Delete File: d\n*** End Patch"
    got = [(f, p.name) for f, p in patch_accesses({"input": body}, CWD)]
    assert got == [("Read", "a"), ("Edit", "a"), ("Write", "b"), ("Write", "c"), ("Edit", "d")]


@pytest.mark.parametrize("mode", ["acceptEdits", "unrestricted"])
def test_a_move_is_a_read_of_its_source(mode: str) -> None:
    assert judge("*** Update File: .env|*** Move to: x", mode, deny="Read(.env)") == "deny"
    assert judge("*** Update File: y|*** Move to: x", mode, deny="Read(.env)") == "allow"


def test_a_move_is_a_write_of_its_destination() -> None:
    assert judge("*** Update File: y|*** Move to: locked/x", deny="Edit(locked/**)") == "deny"


@pytest.mark.parametrize("path", [".envrc", "sub/.ENVRC", ".vscode/tasks.json", "scripts/fmt.sh",
                                  ".git/hooks/pre-commit", ".tether/settings.json"])
@pytest.mark.parametrize("mode", ["acceptEdits", "unrestricted"])
def test_armed_destinations_ask_in_every_mode(path: str, mode: str) -> None:
    assert judge(f"*** Add File: {path}|+x", mode) == "ask"
    assert judge(f"*** Update File: notes|*** Move to: {path}", mode) == "ask"


def test_a_rule_naming_the_armed_path_allows_it() -> None:
    assert judge("*** Add File: .vscode/x.json|+x", cli_allow="Edit(.vscode/**)") == "allow"
    assert judge("*** Add File: scripts/fmt.sh|+x", cli_allow="Write(scripts/fmt.sh)") == "allow"
    assert judge("*** Add File: scripts/fmt.sh|+x", cli_allow="Write(scripts/**)") == "ask"


def test_a_deny_anywhere_wins_over_an_ask() -> None:
    assert judge("*** Add File: .envrc|+x|*** Update File: .env|*** Move to: y", deny="Read(.env)") == "deny"
