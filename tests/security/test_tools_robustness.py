"""Malformed tool arguments at the tool boundary (issue 14; catalogue d9): a NUL byte, an
overlong path or a lone surrogate in any argument is a clear error naming it — never a
traceback, a dead stream-json session, or an effect.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER
from tests.security.support import MODEL, World, attempt, bash, tool
from tether.testing.fake_provider import FakeProvider

SANDBOX = {"TETHER_FS_SANDBOX": "1"}
NO_SANDBOX = {"TETHER_FS_SANDBOX": "0"}
LONG = "a/" * 3000

BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("read-nul", tool("Read", file_path="README.md\0/../../outside/x"), "file_path"),
    ("read-long", tool("Read", file_path=LONG), "file_path"),
    ("write-nul", tool("Write", file_path="PWNED_MARKER\0.txt", content="x"), "file_path"),
    (
        "edit-nul",
        tool("Edit", file_path="README\0.md", old_string="demo", new_string="x"),
        "file_path",
    ),
    (
        "multiedit-nul",
        tool("MultiEdit", file_path="\0", edits=[{"old_string": "demo", "new_string": "x"}]),
        "file_path",
    ),
    ("grep-path-nul", tool("Grep", pattern="demo", path=".\0"), "path"),
    ("grep-glob-nul", tool("Grep", pattern="demo", glob="*\0.md"), "glob"),
    ("grep-pattern-nul", tool("Grep", pattern="de\0mo"), "pattern"),
    ("glob-pattern-nul", tool("Glob", pattern="**/*\0"), "pattern"),
    ("glob-path-nul", tool("Glob", pattern="*", path="\0"), "path"),
    ("ls-nul", tool("LS", path="/\0"), "path"),
    ("ls-ignore-nul", tool("LS", ignore=["a\0"]), "ignore[0]"),
    ("task-output-nul", tool("TaskOutput", task_id="bash_1\0", block=False, timeout=0), "task_id"),
    ("task-stop-nul", tool("TaskStop", task_id="\0"), "task_id"),
    (
        "todo-nul",
        tool("TodoWrite", todos=[{"content": "a\0", "status": "pending", "activeForm": "b"}]),
        "todos[0].content",
    ),
    ("bash-nul", bash("touch PWNED_MARKER\0; touch PWNED_MARKER2"), "command"),
]


@pytest.mark.parametrize("env", [SANDBOX, NO_SANDBOX], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize("mode", ["unrestricted", "default"])
@pytest.mark.parametrize(("name", "call", "argument"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_argument_is_a_clear_tool_error_in_headless(
    world: World, env: dict[str, str], mode: str, name: str, call: dict[str, Any], argument: str
) -> None:
    args = ("--permission-mode", mode) if mode != "default" else ()
    before = {p: p.read_bytes() for p in world.project.rglob("*") if p.is_file()}
    outcome = attempt(world, call, args=args, env=env, timeout=60)
    assert outcome.run.code == 0, outcome.explain()
    assert "Traceback" not in outcome.run.stderr, outcome.run.stderr
    assert len(outcome.results) == 1, outcome.explain()
    output = outcome.outputs[0]
    # Either the tool refused the argument by name, or the permission layer stopped the call
    # before it ran (headless has nobody to ask); both are errors, never a run.
    assert f"`{argument}`" in output or outcome.denied, outcome.explain()
    assert outcome.statuses == ["error"], outcome.explain()
    assert outcome.effect_free(), outcome.explain()
    assert {p: p.read_bytes() for p in world.project.rglob("*") if p.is_file()} == before
    result = [e for e in outcome.run.events if e.get("type") == "result"]
    assert result and result[-1]["result"] == "done", outcome.explain()


class Peer:
    """A stream-json client on tether's stdin/stdout (as the SDK drives it)."""

    def __init__(self, url: str, world: World, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                TETHER,
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "-m",
                MODEL,
                *args,
            ],
            env=world.env(url, env),
            cwd=world.project,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(json.loads(line))

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def user(self, text: str) -> None:
        self.send({"type": "user", "message": {"role": "user", "content": text}})

    def result(self, timeout: float = 30) -> dict[str, Any]:
        """The next turn's result; a permission request on the way is answered `allow`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.seen.append(event)
            if event.get("type") == "control_request":
                self.send(
                    {
                        "type": "control_response",
                        "response": {
                            "subtype": "success",
                            "request_id": event["request_id"],
                            "response": {"behavior": "allow"},
                        },
                    }
                )
            if event.get("type") == "result":
                return event
        raise AssertionError(
            f"no result (exit {self.proc.poll()}); saw {[e.get('type') for e in self.seen]}"
        )

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code, err


@pytest.mark.parametrize("env", [SANDBOX, NO_SANDBOX], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize(
    ("name", "call", "argument"),
    [
        c
        for c in BAD_CALLS
        if c[0]
        in (
            "read-nul",
            "write-nul",
            "grep-path-nul",
            "glob-pattern-nul",
            "bash-nul",
            "task-output-nul",
        )
    ],
    ids=["read", "write", "grep", "glob", "bash", "task-output"],
)
def test_stream_json_session_survives_a_bad_argument(
    world: World, env: dict[str, str], name: str, call: dict[str, Any], argument: str
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [call]},
        {"text": "first done"},
        {"text": "second answer"},
    ]
    with FakeProvider(script) as fake:
        peer = Peer(fake.url, world, env)
        peer.user("go")
        first = peer.result()
        peer.user("again")
        second = peer.result()
        code, err = peer.close()
    assert first["subtype"] == "success" and first["result"] == "first done", first
    assert second["subtype"] == "success" and second["result"] == "second answer", second
    returns = [e for e in peer.seen if e.get("message_type") == "tool_return_message"]
    assert len(returns) == 1 and returns[0]["status"] == "error", returns
    assert f"`{argument}`" in str(returns[0]["tool_return"]), returns
    assert code == 0 and "Traceback" not in err, err
    assert not world.effects()


def test_arguments_with_nul_in_file_content_are_data(world: World, tmp_path: Path) -> None:
    """Content is not a path: a NUL there is written as given (only paths and commands refuse it)."""
    outcome = attempt(
        world,
        tool("Write", file_path="data.txt", content="a\0b"),
        args=("--permission-mode", "acceptEdits"),
    )
    assert outcome.statuses == ["success"], outcome.explain()
    assert (world.project / "data.txt").read_bytes() == b"a\0b"


@pytest.mark.parametrize(
    ("name", "call", "argument"),
    [c for c in BAD_CALLS if c[0] in ("read-nul", "grep-path-nul", "bash-nul")],
    ids=["read", "grep", "bash"],
)
def test_app_server_conversation_survives_a_bad_argument(
    world: World, name: str, call: dict[str, Any], argument: str
) -> None:
    """The real `tether server`: the bad call gets an error result, the turn ends, and the same
    conversation answers its next message (it used to wedge)."""
    import asyncio
    import signal

    from websockets.asyncio.client import connect

    from tests.server.support import Client as ServerClient
    from tests.server.support import ServerProcess, server_env

    script: list[dict[str, Any]] = [
        {"tool_calls": [call]},
        {"text": "first done"},
        {"text": "second answer"},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, world.tether_home, world.root)
        env["HOME"] = str(world.home)
        server = ServerProcess(env, world.project)
        try:

            async def scenario() -> list[Any]:
                async with connect(server.url) as ws:
                    c = ServerClient(ws)
                    runtime = (await c.start(world.project, mode="bypassPermissions"))["runtime"]
                    await c.say(runtime, "go")
                    first = await c.of_type("turn_finished", timeout=30)
                    returns = c.deltas("tool_return_message")
                    await c.say(runtime, "again", request_id="in-2")
                    second = await c.of_type("turn_finished", timeout=30)
                    text = "".join(d["content"] for d in c.deltas("assistant_message"))
                    return [first["stop_reason"], second["stop_reason"], returns, text]

            first, second, returns, text = asyncio.run(scenario())
        finally:
            code = server.stop(signal.SIGTERM)
    assert first == second == "end_turn"
    assert len(returns) == 1 and returns[0]["status"] == "error", returns
    assert f"`{argument}`" in str(returns[0]["tool_return"]), returns
    assert text.endswith("second answer"), text
    assert code == 0 and not world.effects()
