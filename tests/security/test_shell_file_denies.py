"""File deny rules through the shell, tried: with `Read(.env)` denied, no spelling — a glob, a
bracket, a brace, an option that names the file, git's object store or history — prints the
canary in `.env` (the world's git repository has `.env` committed)."""

from __future__ import annotations

import pytest

from tests.security.support import World, attempt, bash

DENY_ENV = {"permissions": {"deny": ["Read(.env)"]}}
SPELLINGS = [
    "cat .e*", "cat .[e]nv", "cat .en?", "cat {.env,x}", "cat .{env,x}", "grep -h . .e*",
    "date -f.env", "date -f .env", "date --fi=.env", "git cat-file --batch <<< HEAD:.env",
    "git cat-file -p HEAD:.env", "git log -p", "git show HEAD:.env", "git show HEAD",
    "for f in .e*; do cat \"$f\"; done", "cat $(echo .env)", "xargs cat <<< .env",
    "head -c 200 .en[v]", "grep -f .env .env", "cat < .e*", "nl .e?v",
]


@pytest.mark.parametrize("command", SPELLINGS)
def test_a_read_deny_holds_for_every_shell_spelling(git_world: World, command: str) -> None:
    out = attempt(git_world, bash(command), settings=DENY_ENV)
    assert not out.leaked, out.explain()
    assert out.denied, out.explain()


def test_unrelated_reads_still_run_under_the_deny_rule(git_world: World) -> None:
    out = attempt(git_world, bash("cat README.md && git log --oneline -1 && wc -l *.md"),
                  settings=DENY_ENV)
    assert out.statuses == ["success"], out.explain()
    assert "# demo" in out.outputs[0] and not out.leaked
