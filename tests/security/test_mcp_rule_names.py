"""Attacks on MCP permission rules (issue 30.3): a rule names a whole server (`mcp__git`) or a
whole tool, case-folded. A hostile config or model must not get server `git__evil` admitted by
`mcp__git`, nor slip server `Evil` past a deny of `mcp__evil`. Each case runs the real `tether`
with real MCP servers whose tool creates a file: judged by whether the file appeared."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.security.support import MARKER, World, attempt

REPO = Path(__file__).resolve().parents[2]


def servers(world: World, *names: str) -> dict[str, Any]:
    spec = {"command": sys.executable, "args": ["-m", "tests.security.mcp_marker_server"],
            "cwd": str(REPO), "env": {"MARKER_DIR": str(world.project)}}
    return {"mcpServers": {name: spec for name in names}}


def touch(world: World, server: str, rule_args: list[str], *, settings: dict[str, Any] | None = None,
          configured: tuple[str, ...] = ()) -> tuple[bool, str]:
    """The model calls `touch` of `server`; whether the file appeared, and the tool return."""
    config = {**servers(world, *(configured or (server,))), **(settings or {})}
    call = {"name": f"mcp__{server}__touch", "arguments": {"name": MARKER}}
    out = attempt(world, call, args=rule_args,
                  settings=config, timeout=120)
    assert out.run.code == 0, out.explain()
    return bool(world.effects()), " ".join(out.outputs)


# (server the call goes to, servers configured, --allowedTools): none of these admits it.
NOT_ADMITTED = [
    ("git__evil", ("git", "git__evil"), "mcp__git"),
    ("git__evil", ("git__evil",), "mcp__git"),
    ("github", ("git", "github"), "mcp__git"),
    ("git_evil", ("git_evil",), "mcp__git"),
    ("git-evil", ("git-evil",), "mcp__git"),
    ("gitx", ("gitx",), "mcp__git__touch"),
]


@pytest.mark.parametrize(("server", "configured", "rule"), NOT_ADMITTED,
                         ids=[f"{s}-by-{r}" for s, _, r in NOT_ADMITTED])
def test_a_server_rule_admits_no_other_server(world: World, server: str,
                                              configured: tuple[str, ...], rule: str) -> None:
    made, output = touch(world, server, ["--allowedTools", rule], configured=configured)
    assert not made and "requires approval" in output, output


@pytest.mark.parametrize("rule", ["mcp__git", "mcp__GIT", "mcp__git__touch", "mcp__Git__Touch"])
def test_the_named_server_is_still_admitted(world: World, rule: str) -> None:
    made, output = touch(world, "git", ["--allowedTools", rule], configured=("git", "git__evil"))
    assert made, output


# A deny of one spelling covers the server whatever its case; yolo would run anything else.
DENIED = [
    ("Evil", "mcp__evil"),
    ("EVIL", "mcp__evil"),
    ("evil", "mcp__Evil"),
    ("Evil", "mcp__evil__touch"),
    ("Evil", "mcp__EVIL__TOUCH"),
]


@pytest.mark.parametrize(("server", "rule"), DENIED, ids=[f"{s}-by-{r}" for s, r in DENIED])
@pytest.mark.parametrize("where", ["settings", "cli"])
def test_a_deny_covers_the_server_in_any_case(world: World, server: str, rule: str, where: str) -> None:
    if where == "settings":
        made, output = touch(world, server, ["--yolo"], settings={"permissions": {"deny": [rule]}})
    else:
        made, output = touch(world, server, ["--yolo", "--disallowedTools", rule])
    assert not made and "denied" in output.lower(), output


def test_yolo_without_a_deny_runs_the_tool(world: World) -> None:
    """The control: the server works, so the cases above are refusals, not failures."""
    made, output = touch(world, "Evil", ["--yolo"])
    assert made, output
