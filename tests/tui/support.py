"""Driving the real TetherApp in-process (Textual's `run_test`) against the fake provider."""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.cli.flags import parse_run_flags
from tether.cli.runner import prepare
from tether.tui.app import TetherApp
from tether.tui.sessions import apply_resume

MODEL = "anthropic/claude-test"
SIZE = (110, 40)


def point_at(fake_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What tests/e2e/support.tether_env does for a subprocess, for this process."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")


def make_app(*args: str) -> TetherApp:
    argv = list(args) if any(a in ("--model", "-m") for a in args) or "--resume" in args else ["--model", MODEL, *args]
    flags = parse_run_flags(argv, stdin_is_tty=True)
    assert not flags.headless
    apply_resume(flags)
    return TetherApp(prepare(flags))


async def wait_for(pilot: Any, condition: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await pilot.pause(0.05)


async def submit(pilot: Any, text: str, *, typed: bool = True) -> None:
    """Type `text` key by key (as a user would), or put it in the box at once; press enter."""
    if typed:
        await pilot.press(*("space" if ch == " " else ch for ch in text))
    else:
        pilot.app.prompt_box.insert(text)
    await pilot.press("enter")


async def settle(pilot: Any, app: TetherApp, timeout: float = 15.0) -> None:
    await wait_for(pilot, lambda: not app.busy, timeout, "the turn to end")
    await pilot.pause(0.2)


def screen_text(app: TetherApp) -> str:
    """The current screen as plain text, from Textual's SVG screenshot."""
    svg = app.export_screenshot()
    text = "".join(re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S))
    return html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")


def disk_entries(home: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(home.glob("conversations/*/messages.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return [e["message"] for e in out if "message" in e]


def assert_every_call_answered(home: Path) -> None:
    messages = disk_entries(home)
    calls = {p["id"] for m in messages if m["role"] == "assistant" for p in m["content"] if p["type"] == "toolCall"}
    results = {m["toolCallId"] for m in messages if m["role"] == "toolResult"}
    assert calls <= results, f"unanswered tool calls: {calls - results}"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "test command"}}


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains `marker` (to prove an interrupted tool left nothing)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            out.append(int(proc.name))
    return out
