"""The other toolsets' tools meet the same rules, guards and sandbox as Claude Code's: a patch is
an edit of every path it touches (one bad path and nothing is written), `exec_command` and
`run_shell_command` are Bash, Gemini's file tools are Read/Write/Edit. Real `tether` runs,
effects judged on disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.security.support import CANARY_SECRET, MARKER, World, attempt, tool

CODEX = ["--toolset", "codex"]
GEMINI = ["--toolset", "gemini"]


def patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "\n".join(sections) + "\n*** End Patch"


def add(path: str) -> str:
    return f"*** Add File: {path}\n+owned"


def _link_out(w: World) -> None:
    (w.project / "out").symlink_to(w.outside)


def _link_git(w: World) -> None:
    (w.project / "hooks").symlink_to(w.project / ".git" / "hooks")


# (id, setup, call, extra args): every one must leave no MARKER anywhere and notes.md unchanged.
ATTACKS: list[tuple[str, Callable[[World], None] | None, Callable[[World], dict[str, Any]], list[str]]] = [
    ("patch-absolute-outside", None,
     lambda w: tool("ApplyPatch", input=patch(add(f"{w.outside}/{MARKER}"))), ["--permission-mode", "acceptEdits"]),
    ("patch-dotdot-outside", None,
     lambda w: tool("ApplyPatch", input=patch(add(f"../outside/{MARKER}"))), ["--permission-mode", "acceptEdits"]),
    ("patch-one-good-one-outside", None,
     lambda w: tool("ApplyPatch", input=patch("*** Update File: notes.md\n@@\n-notes\n+changed",
                                              add(f"{w.outside}/{MARKER}"))),
     ["--permission-mode", "acceptEdits"]),
    ("patch-move-outside", None,
     lambda w: tool("ApplyPatch", input=patch(f"*** Update File: notes.md\n*** Move to: ../outside/{MARKER}")),
     ["--permission-mode", "acceptEdits"]),
    ("patch-through-symlinked-dir", _link_out,
     lambda w: tool("ApplyPatch", input=patch(add(f"out/{MARKER}"))), ["--yolo"]),
    ("patch-git-hook-via-link", _link_git,
     lambda w: tool("ApplyPatch", input=patch(add(f"hooks/{MARKER}"))), ["--yolo"]),
    ("patch-denied-path-among-good", None,
     lambda w: tool("ApplyPatch", input=patch("*** Update File: notes.md\n@@\n-notes\n+changed",
                                              "*** Delete File: .env", add(MARKER))),
     ["--yolo", "--disallowedTools", "Edit(.env)"]),
    ("patch-tether-state", None,
     lambda w: tool("apply_patch", input=patch(add(f"{w.tether_home}/{MARKER}"))),
     ["--toolset", "codex_snake", "--yolo"]),
    ("exec-needs-approval", None,
     lambda w: tool("exec_command", cmd=f"touch {MARKER}", description="x"), []),
    ("exec-deny-rule", None,
     lambda w: tool("exec_command", cmd=f"echo hi && touch {MARKER}", description="x"),
     ["--yolo", "--disallowedTools", "Bash(touch:*)"]),
    ("exec-workdir-outside", None,
     lambda w: tool("exec_command", cmd=f"touch {MARKER}", workdir=str(w.outside), description="x"), []),
    ("gemini-shell-deny-rule", None,
     lambda w: tool("run_shell_command", command=f"touch {MARKER}"),
     [*GEMINI, "--yolo", "--disallowedTools", "Bash(touch:*)"]),
    ("gemini-write-outside", None,
     lambda w: tool("write_file", file_path=f"{w.outside}/{MARKER}", content="x"),
     [*GEMINI, "--permission-mode", "acceptEdits"]),
    ("gemini-replace-denied-file", None,
     lambda w: tool("replace", file_path=".env", old_string="API_KEY", new_string=MARKER),
     [*GEMINI, "--yolo", "--disallowedTools", "Edit(.env)"]),
]  # fmt: skip


@pytest.mark.parametrize(("setup", "call", "extra"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_toolset_writes_and_commands_stay_inside_the_rules(
    tmp_path: Path, setup: Callable[[World], None] | None, call: Callable[[World], dict[str, Any]], extra: list[str]
) -> None:
    world = World.build(tmp_path, git=True)
    if setup is not None:
        setup(world)
    args = extra if "--toolset" in extra else [*CODEX, *extra]
    outcome = attempt(world, call(world), args=args)
    assert outcome.run.code == 0, outcome.explain()
    assert outcome.effect_free(), outcome.explain()
    assert outcome.statuses == ["error"], outcome.explain()
    assert (world.project / "notes.md").read_text() == "notes\n", outcome.explain()
    assert CANARY_SECRET in (world.project / ".env").read_text()


READS: list[tuple[str, Callable[[World], dict[str, Any]], list[str]]] = [
    ("gemini-read-ssh-key", lambda w: tool("read_file", absolute_path=str(w.home / ".ssh/id_rsa")), GEMINI),
    ("gemini-read-many-credentials", lambda w: tool("read_many_files", paths=[str(w.home / ".aws/credentials")]),
     GEMINI),
    ("gemini-grep-home", lambda w: tool("search_file_content", pattern="secret", path=str(w.home)), GEMINI),
    ("gemini-read-provider-key", lambda w: tool("read_file", absolute_path=str(w.tether_home / "providers/anthropic.json")),
     [*GEMINI, "--yolo"]),
    ("view-image-provider-key", lambda w: tool("ViewImage", path=str(w.tether_home / "providers/anthropic.json")),
     [*CODEX, "--yolo"]),
    ("exec-cat-key", lambda w: tool("exec_command", cmd=f"cat {w.home}/.ssh/id_rsa", description="x"), CODEX),
]  # fmt: skip


@pytest.mark.parametrize(("call", "args"), [r[1:] for r in READS], ids=[r[0] for r in READS])
def test_toolset_reads_do_not_leak_secrets(
    tmp_path: Path, call: Callable[[World], dict[str, Any]], args: list[str]
) -> None:
    world = World.build(tmp_path)
    outcome = attempt(world, call(world), args=args)
    assert outcome.run.code == 0, outcome.explain()
    assert not outcome.leaked, outcome.explain()
    assert outcome.statuses == ["error"], outcome.explain()
