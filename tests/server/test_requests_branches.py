"""Git branches over protocol v2 (`search_branches`, `checkout_branch`): the workspace's branches
listed and switched as git itself does, outside the workspace refused, and nothing for a scoped
token (git runs the repository's own hooks, unconfined)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_branches_are_listed_and_checked_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
        "-m", "first")
    git(project, "branch", "feature/login")
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                found = await ask(c, "search_branches", query="")
                assert {(b["name"], b["is_current"]) for b in found["branches"]} == {
                    ("main", True), ("feature/login", False)}
                only = await ask(c, "search_branches", query="LOGIN")
                assert [b["name"] for b in only["branches"]] == ["feature/login"]
                moved = await ask(c, "checkout_branch", branch="feature/login")
                assert moved["branch"] == "feature/login"
                assert git(project, "branch", "--show-current") == "feature/login"
                made = await ask(c, "checkout_branch", branch="fix-1", create=True)
                assert made["success"] and git(project, "branch", "--show-current") == "fix-1"
                bad = await ask(c, "checkout_branch", branch="--orphan")
                assert bad["success"] is False and bad["branch"] == "--orphan"
                out = await ask(c, "search_branches", query="", cwd=str(tmp_path))
                assert out["success"] is False and "outside" in out["error"]

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    no = await ask(s, "checkout_branch", branch="main")
                    assert no["success"] is False and "scoped" in no["error"]
                    assert git(project, "branch", "--show-current") == "fix-1"

        asyncio.run(scenario())
