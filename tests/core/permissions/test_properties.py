"""Properties of `decide()` over random rule sets and calls (hypothesis).

A rule may only ever make the checker stricter in the direction it names: a deny never admits
anything, an allow never lifts a deny, an ask never lifts anything; and the modes are ordered,
strict ≤ standard ≤ acceptEdits ≤ unrestricted, with a deny the same in all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.permissions.support import policy, rules, shell, tool
from tests.core.permissions.test_security_cases import A_BENIGN, A_BYPASSES
from tether.core.permissions import Decision

RANK = {"deny": 0, "ask": 1, "allow": 2}  # how permissive a verdict is
MODES_BY_STRICTNESS = ("strict", "standard", "acceptEdits", "unrestricted")
RULE_KINDS = ("deny", "cli_deny", "always_ask", "ask", "allow", "session_allow", "cli_allow")

SHELL_RULES = [
    "Bash(git status:*)",
    "Bash(ls:*)",
    "Bash(rm:*)",
    "Bash(curl:*)",
    "Bash(cat:*)",
    "Bash(git:*)",
    "Bash(git status)",
    "Bash(echo hello)",
    "Bash(timeout:*)",
    "Bash(npm test)",
    "Bash(python3:*)",
    "Bash(touch:*)",
]
FILE_RULES = [
    "Read(src/**)",
    "Read(.env)",
    "Read(~/.ssh/**)",
    "Read(/etc/**)",
    "Read(**)",
    "Read(*.md)",
    "Edit(src/**)",
    "Edit(**)",
    "Edit(.env)",
    "Write(src/**)",
    "Write(.tether/**)",
    "Write(*.py)",
    "Write(~/**)",
    "Grep(src/**)",
]
WHOLE_TOOLS = ["Bash", "Read", "Edit", "Write", "*"]
RULE_POOL = SHELL_RULES + FILE_RULES + WHOLE_TOOLS

SHELL_POOL = sorted(
    {c for _, c, _ in A_BYPASSES}
    | set(A_BENIGN)
    | {
        "npm test",
        "cat .env",
        "cat src/a.py",
        "cat ~/.ssh/id_rsa",
        "cat src/k",
        "echo hi > src/out.txt",
        "echo hi > .tether/settings.json",
        "cat < .env",
        "git status && npm test",
        "python3 -m pytest",
        "touch src/new.py",
        "echo hello",
        "ls src | wc -l",
        "# only a comment",
        "",
    }
)
PATH_POOL = [
    "src/a.py",
    "src/new.py",
    "README.md",
    ".env",
    ".ENV",
    "src/../.env",
    "src/k",
    "src/d/passwd",
    "src/dangling",
    "docs/x.md",
    ".tether/settings.json",
    "../outside.txt",
    "~/.ssh/id_rsa",
    "~/.bashrc",
    "/etc/passwd",
    "/proc/self/root/etc/passwd",
    "/dev/fd/3",
    "{cwd}/src/a.py",
    "{cwd}_evil/x",
    ".",
]
FILE_TOOLS = ["Read", "Edit", "Write", "Grep", "Glob", "LS", "MultiEdit", "read_file"]
OTHER_TOOLS = ["TodoWrite", "mcp__server__act", "WebFetch"]


@dataclass(frozen=True)
class Workspace:
    cwd: Path
    home: Path


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    base = tmp_path_factory.mktemp("props")
    home, cwd = base / "home", base / "proj"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("CANARY\n")
    (home / ".bashrc").write_text("")
    (cwd / "src").mkdir(parents=True)
    (cwd / "docs").mkdir()
    (cwd / "src" / "a.py").write_text("x = 1\n")
    (cwd / "README.md").write_text("hi\n")
    (cwd / ".env").write_text("SECRET=CANARY\n")
    (cwd / "docs" / "x.md").write_text("doc\n")
    (base / "outside.txt").write_text("out\n")
    (base / "proj_evil").mkdir()
    os.symlink(home / ".ssh" / "id_rsa", cwd / "src" / "k")
    os.symlink("/etc", cwd / "src" / "d")
    os.symlink(home / "missing", cwd / "src" / "dangling")
    return Workspace(cwd, home)


# -- strategies ------------------------------------------------------------------------------

rule_texts = st.lists(st.sampled_from(RULE_POOL), max_size=4, unique=True)
rule_sets = st.fixed_dictionaries(
    {"deny": rule_texts, "always_ask": rule_texts, "ask": rule_texts, "allow": rule_texts},
    optional={"cli_deny": rule_texts, "session_allow": rule_texts, "cli_allow": rule_texts},
)
shell_calls = st.tuples(st.just("Bash"), st.sampled_from(SHELL_POOL))
file_calls = st.tuples(st.sampled_from(FILE_TOOLS), st.sampled_from(PATH_POOL))
other_calls = st.tuples(st.sampled_from(OTHER_TOOLS), st.just(""))
calls = st.one_of(shell_calls, file_calls, other_calls)
modes = st.sampled_from(MODES_BY_STRICTNESS)


def judge(
    ws: Workspace, texts: Mapping[str, Sequence[str]], call: tuple[str, str], mode: str
) -> Decision:
    pol = policy(ws.cwd, ws.home, rules(**texts), mode=mode)
    name, arg = call
    if name == "Bash":
        return shell(pol, arg)
    if name in OTHER_TOOLS:
        return tool(pol, name)
    return tool(pol, name, arg.format(cwd=ws.cwd))


def plus(texts: Mapping[str, Sequence[str]], kind: str, rule: str) -> dict[str, list[str]]:
    out = {k: list(v) for k, v in texts.items()}
    out.setdefault(kind, [])
    if rule not in out[kind]:
        out[kind].append(rule)
    return out


def show(
    call: tuple[str, str], texts: Mapping[str, Sequence[str]], before: Decision, after: Decision
) -> str:
    return f"{call}: {before.verdict} ({before.reason}) -> {after.verdict} ({after.reason}); rules {dict(texts)}"


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    texts=rule_sets,
    call=calls,
    mode=modes,
    kind=st.sampled_from(("deny", "cli_deny")),
    rule=st.sampled_from(RULE_POOL),
)
def test_adding_a_deny_rule_never_admits_anything(ws, texts, call, mode, kind, rule) -> None:
    before = judge(ws, texts, call, mode)
    after = judge(ws, plus(texts, kind, rule), call, mode)
    assert after.verdict != "allow" or before.verdict == "allow", show(call, texts, before, after)
    assert RANK[after.verdict] <= RANK[before.verdict], show(call, texts, before, after)


@settings(max_examples=300, deadline=None)
@given(
    texts=rule_sets,
    call=calls,
    mode=modes,
    kind=st.sampled_from(("allow", "session_allow", "cli_allow")),
    rule=st.sampled_from(RULE_POOL),
)
def test_adding_an_allow_rule_never_lifts_a_deny(ws, texts, call, mode, kind, rule) -> None:
    before = judge(ws, texts, call, mode)
    after = judge(ws, plus(texts, kind, rule), call, mode)
    if before.verdict == "deny":
        assert after.verdict == "deny", show(call, texts, before, after)


@settings(max_examples=300, deadline=None)
@given(
    texts=rule_sets,
    call=calls,
    mode=modes,
    kind=st.sampled_from(("ask", "always_ask")),
    rule=st.sampled_from(RULE_POOL),
)
def test_adding_an_ask_rule_lifts_nothing(ws, texts, call, mode, kind, rule) -> None:
    before = judge(ws, texts, call, mode)
    after = judge(ws, plus(texts, kind, rule), call, mode)
    if before.verdict == "deny":
        assert after.verdict == "deny", show(call, texts, before, after)
    if after.verdict == "allow":
        assert before.verdict == "allow", show(call, texts, before, after)


@settings(max_examples=300, deadline=None)
@given(texts=rule_sets, call=calls)
def test_modes_are_ordered_and_deny_is_deny_in_every_mode(ws, texts, call) -> None:
    verdicts = {mode: judge(ws, texts, call, mode) for mode in MODES_BY_STRICTNESS}
    shown = ", ".join(f"{m}={d.verdict} ({d.reason})" for m, d in verdicts.items())
    denied = {m for m, d in verdicts.items() if d.verdict == "deny"}
    assert not denied or len(denied) == len(verdicts), f"{call} {dict(texts)}: {shown}"
    for stricter, looser in zip(MODES_BY_STRICTNESS, MODES_BY_STRICTNESS[1:], strict=False):
        assert RANK[verdicts[stricter].verdict] <= RANK[verdicts[looser].verdict], (
            f"{call} {dict(texts)}: {stricter} is more permissive than {looser}: {shown}"
        )


def test_the_pools_reach_every_verdict(ws) -> None:
    """The properties mean little if the pools never produce an allow, an ask and a deny."""
    seen = {
        judge(
            ws, {"allow": ["Bash(ls:*)"], "deny": ["Bash(rm:*)"]}, ("Bash", "ls"), "standard"
        ).verdict,
        judge(
            ws, {"allow": ["Bash(ls:*)"], "deny": ["Bash(rm:*)"]}, ("Bash", "rm x"), "standard"
        ).verdict,
        judge(ws, {}, ("Edit", "src/a.py"), "standard").verdict,
        judge(ws, {"deny": ["Read(.env)"]}, ("Read", ".ENV"), "unrestricted").verdict,
    }
    assert seen == {"allow", "ask", "deny"}
