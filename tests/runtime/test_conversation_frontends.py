"""The same scripted turn through every frontend (one-shot headless, bidirectional stream-json,
the TUI, the App Server) leaves the same transcript on disk and the same effect checkpoints:
they all drive turns through `runtime/turns/conversation.py` (issue 15).

The turn: one Write the user settings allow (runs, checkpointed) and one Write that needs
approval, answered "no" (one-shot headless cannot ask, so every frontend denies; only the
denial's wording is each frontend's own).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
ALLOWED, ASKED = "auto.txt", "asked.txt"


def script() -> list[dict[str, Any]]:
    def write(name: str) -> dict[str, Any]:
        return {"name": "Write", "arguments": {"file_path": name, "content": f"{name}\n"}}

    return [{"tool_calls": [write(ALLOWED), write(ASKED)]}, {"text": "finished"}]


def setup_home(root: Path) -> tuple[Path, Path]:
    home, work = root / "tether-home", root / "project"
    home.mkdir(parents=True)
    work.mkdir()
    (root / "home").mkdir()
    (home / "settings.json").write_text(json.dumps({"permissions": {"allow": [f"Write({ALLOWED})"]}}))
    return home, work


def transcript(home: Path, root: Path) -> list[Any]:
    """The conversation on disk, without what differs by nature (ids, times, usage, the
    denial's wording, the test's folder): roles, texts, tool calls and results in order."""
    files = sorted(home.glob("agents/*/conversations/*/messages.jsonl")) or sorted(
        home.rglob("messages.jsonl"))
    assert len(files) == 1, files
    out: list[Any] = []
    asked: set[str] = set()  # ids of the calls that needed approval
    for line in files[0].read_text().replace(str(root), "<root>").splitlines():
        entry = json.loads(line)
        message = entry.get("message")
        if message is None:
            continue
        role = message["role"]
        if role == "toolResult":
            text = "".join(p.get("text", "") for p in message["content"])
            denied = message["toolCallId"] in asked and message["isError"]
            out.append((role, message["toolCallId"], message["toolName"], message["isError"],
                        "<denied>" if denied else text))
            continue
        content = message["content"]
        asked |= {p["id"] for p in content if isinstance(p, dict) and p.get("type") == "toolCall"
                  and (p.get("arguments") or {}).get("file_path") == ASKED}
        parts = [content] if isinstance(content, str) else [
            (p["type"], p.get("text") or (p.get("id"), p.get("name"), json.dumps(p.get("arguments"), sort_keys=True)))
            for p in content
        ]
        out.append((role, parts))
    return out


def checkpoint_rows(home: Path, root: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / "checkpoints.db") as db:
        rows = db.execute(
            "SELECT tool_call_id, tool_name, arguments, phase, result FROM effect_checkpoints "
            "ORDER BY tool_call_id").fetchall()
    text = [tuple(bytes(v).decode() if isinstance(v, bytes | memoryview) else v for v in r) for r in rows]
    return [tuple(v.replace(str(root), "<root>") if isinstance(v, str) else v for v in r) for r in text]


def point(monkeypatch: pytest.MonkeyPatch, root: Path, url: str) -> None:
    monkeypatch.setenv("TETHER_HOME", str(root / "tether-home"))
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.chdir(root / "project")


def through_headless(root: Path, url: str) -> None:
    env = tether_env(url, MODEL, {"TETHER_HOME": str(root / "tether-home"), "HOME": str(root / "home")})
    run = run_tether(["-p", "go", "--model", MODEL], env=env, cwd=root / "project")
    assert run.code == 0, run.stderr


def through_bidirectional(root: Path, url: str) -> None:
    from tests.e2e.test_bidirectional import Client, is_control

    c = Client(url, root / "project", env_extra={"TETHER_HOME": str(root / "tether-home"),
                                                  "HOME": str(root / "home")})
    c.user("go")
    req = c.wait_for(is_control("can_use_tool"))
    assert req["request"]["input"]["file_path"] == ASKED
    c.send({"type": "control_response", "response": {"subtype": "success", "request_id": req["request_id"],
            "response": {"behavior": "deny", "message": "no"}}})
    assert c.result()["subtype"] == "success"
    assert c.close() == 0


def through_tui(root: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.tui.support import SIZE, make_app, settle, submit, wait_for
    from tether.tui.approvals import ApprovalScreen

    point(monkeypatch, root, url)

    async def scenario() -> None:
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await submit(pilot, "go")
            await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
            await pilot.press("n")
            await pilot.pause(0.1)
            await submit(pilot, "no")
            await settle(pilot, app)

    asyncio.run(scenario())


def through_app_server(root: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.server.support import Client, InProcess

    point(monkeypatch, root, url)
    project = root / "project"

    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "go")
            req = await c.of_type("control_request")
            await c.answer(runtime, req["request_id"], "deny", message="no")
            assert (await c.of_type("turn_finished"))["stop_reason"] == "end_turn"

    asyncio.run(scenario())


def test_every_frontend_leaves_the_same_transcript_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tether_home: Path
) -> None:
    seen: dict[str, tuple[list[Any], list[tuple[Any, ...]]]] = {}
    for name in ("headless", "bidirectional", "tui", "app_server"):
        root = tmp_path / name
        home, work = setup_home(root)
        with FakeProvider(script()) as fake, monkeypatch.context() as m:
            if name == "headless":
                through_headless(root, fake.url)
            elif name == "bidirectional":
                through_bidirectional(root, fake.url)
            elif name == "tui":
                through_tui(root, fake.url, m)
            else:
                through_app_server(root, fake.url, m)
            assert len(fake.requests) == 2, name  # the results went back; the model finished
        assert (work / ALLOWED).read_text() == f"{ALLOWED}\n", name
        assert not (work / ASKED).exists(), name
        seen[name] = (transcript(home, root), checkpoint_rows(home, root))

    first, rows = seen["headless"]
    assert [m[0] for m in first] == ["user", "assistant", "toolResult", "toolResult", "assistant"]
    assert len(rows) == 1 and rows[0][1] == "Write" and rows[0][3] == "after"  # the allowed one
    for name, (messages, checkpoints) in seen.items():
        assert messages == first, name
        assert checkpoints == rows, name
