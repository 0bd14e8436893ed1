"""End to end: a hung MCP call (tests/mcp/servers/hanging.py never answers) ended through every
frontend of the real `tether` command — `-p` with SIGINT and SIGTERM, the configured limits, the
App Server's `abort_message`, the stream-json `interrupt` — with the call recorded on disk."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER, run_tether, tether_env, transcript_lines
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
REPO = Path(__file__).resolve().parents[2]
HANG = {"tool_calls": [{"name": "mcp__hang__hang", "arguments": {}}]}
PROMPTLY = 10.0  # a generous bound for "promptly" (the bench measures; this only catches a hang)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def settings(home: Path, mark: Path, *, server: dict[str, Any] | None = None, **top: Any) -> None:
    hang = {"command": sys.executable, "args": ["-m", "tests.mcp.servers.hanging"], "cwd": str(REPO),
            "env": {"HANGING_MARK": str(mark)}, **(server or {})}
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"hang": hang}, **top}))


def mute_settings(home: Path, mark: Path) -> None:
    """A server that starts and never says a word: its handshake waits the 30 s start limit."""
    mute = {"command": sys.executable,
            "args": ["-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                     "time.sleep(300)", str(mark)]}
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"mute": mute}}))


def wait_for_file(path: Path, timeout: float = 60) -> int:
    """The pid the hanging server wrote as the call reached it."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, "the call never reached the hanging server"
        time.sleep(0.05)
    return int(path.read_text())


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int, within: float = 5) -> bool:
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def recorded_result(home: Path) -> dict[str, Any]:
    """The hung call's result in the transcript on disk."""
    results = [line["message"] for line in transcript_lines(home)
               if line.get("type") == "message" and line["message"].get("role") == "toolResult"
               and line["message"].get("toolName") == "mcp__hang__hang"]
    assert len(results) == 1, results
    return results[0]


def checkpoint(home: Path) -> tuple[str, dict[str, Any]]:
    """The hung call's effect checkpoint: settled ('after') with the exact result."""
    with sqlite3.connect(home / "checkpoints.db") as db:
        rows = db.execute("SELECT phase, result FROM effect_checkpoints WHERE tool_name = ?",
                          ("mcp__hang__hang",)).fetchall()
    assert len(rows) == 1, rows
    return rows[0][0], json.loads(rows[0][1])


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_a_hung_call_and_the_run(workdir: Path, tether_home: Path, tmp_path: Path,
                                               sig: int, code: int) -> None:
    mark = tmp_path / "hang.pid"
    settings(tether_home, mark)
    with FakeProvider([HANG, {"text": "never sent"}]) as fake:
        proc = subprocess.Popen([TETHER, "-p", "go", "--model", MODEL, "--output-format", "stream-json",
                                 "--yolo"], cwd=workdir, env=tether_env(fake.url, MODEL),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            server = wait_for_file(mark)
            proc.send_signal(sig)
            try:
                out, err = proc.communicate(timeout=PROMPTLY)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                raise AssertionError(f"tether did not exit after {sig!r}: {err[-3000:]}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert len(fake.requests) == 1  # the interrupted result is recorded, not sent
    assert proc.returncode == code, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    returned = [e for e in events if e.get("message_type") == "tool_return_message"]
    assert [(r["status"], r["tool_return"]) for r in returned] == [("error", "Interrupted by user")]
    name = signal.Signals(sig).name
    assert any(e["type"] == "error" and e["message"] == f"Interrupted by {name}" for e in events)
    recorded = recorded_result(tether_home)
    assert recorded["isError"] and recorded["content"][0]["text"] == "Interrupted by user"
    assert checkpoint(tether_home) == ("after", {"output": "Interrupted by user", "is_error": True,
                                                 "stdout": None, "stderr": None})
    assert gone(server), "the hanging MCP server outlived tether"


@pytest.mark.parametrize(("top", "server", "limit"), [
    ({"mcpToolTimeout": 1000}, {}, 1000),  # the setting
    ({"mcpToolTimeout": 600000}, {"timeout": 5000}, 5000),  # the server's own limit wins
])
def test_a_configured_limit_ends_a_hung_call_as_timed_out(
    workdir: Path, tether_home: Path, tmp_path: Path, top: dict[str, Any], server: dict[str, Any],
    limit: int,
) -> None:
    mark = tmp_path / "hang.pid"
    settings(tether_home, mark, server=server, **top)
    with FakeProvider([HANG, {"text": "went on"}]) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", "--yolo"],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=120)
        bodies = [r["body"] for r in fake.requests]
    assert run.code == 0, run.stderr
    [returned] = run.of_type("message", "tool_return_message")
    said = f"MCP tool call timed out after {limit}ms"
    assert returned["status"] == "error" and returned["tool_return"].startswith(said), returned
    assert said in json.dumps(bodies[1]["messages"][-1])  # the model was told
    assert run.of_type("result")[0]["result"] == "went on"
    assert recorded_result(tether_home)["content"][0]["text"].startswith(said)
    assert checkpoint(tether_home)[0] == "after"
    assert mark.exists()


def test_a_bad_setting_is_a_clear_error(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    settings(tether_home, tmp_path / "hang.pid", mcpToolTimeout="10m")
    run = run_tether(["-p", "go", "--model", MODEL], env=tether_env("http://127.0.0.1:9", MODEL),
                     cwd=workdir, timeout=60)
    assert run.code == 1
    assert "mcpToolTimeout must be a whole number of milliseconds" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_stream_json_interrupt_ends_a_hung_call(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    from tests.e2e.test_bidirectional import Client

    mark = tmp_path / "hang.pid"
    settings(tether_home, mark)
    with FakeProvider([HANG, {"text": "the next turn"}]) as fake:
        c = Client(fake.url, workdir, "--yolo")
        try:
            c.user("go")
            server = wait_for_file(mark)
            c.send({"type": "control_request", "request_id": "stop", "request": {"subtype": "interrupt"}})
            interrupted = c.wait_for(lambda e: e["type"] == "result", timeout=PROMPTLY)
            assert interrupted["subtype"] == "interrupted", interrupted
            returned = [e for e in c.seen if e.get("message_type") == "tool_return_message"]
            assert [r["tool_return"] for r in returned] == ["Interrupted by user"]
            c.user("still there?")
            assert c.result()["result"] == "the next turn"
        finally:
            started = time.monotonic()
            code = c.close()
            closed_in = time.monotonic() - started
    assert code == 0
    assert closed_in < PROMPTLY
    assert recorded_result(tether_home)["content"][0]["text"] == "Interrupted by user"
    assert checkpoint(tether_home)[0] == "after"
    assert gone(server)


def test_app_server_abort_message_ends_a_hung_call(workdir: Path, tmp_path: Path) -> None:
    from websockets.asyncio.client import connect

    from tests.server.support import Client, ServerProcess, server_env

    home, mark = tmp_path / "th", tmp_path / "hang.pid"
    settings(home, mark)
    with FakeProvider([HANG, {"text": "after the abort"}]) as fake:
        proc = ServerProcess(server_env(fake.url, home, tmp_path), workdir)
        try:
            async def scenario() -> None:
                async with connect(proc.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(workdir, mode="bypassPermissions"))["runtime"]
                    await c.say(runtime, "go")
                    await asyncio.to_thread(wait_for_file, mark)
                    await c.send({"type": "abort_message", "request_id": "ab", "runtime": runtime})
                    assert (await c.of_type("abort_message_response"))["aborted"] is True
                    finished = await c.of_type("turn_finished", timeout=PROMPTLY)
                    assert finished["stop_reason"] == "cancelled"
                    returns = [d["tool_return"] for d in c.deltas("tool_return_message")]
                    assert returns == ["Interrupted by user"]
                    await c.say(runtime, "again", request_id="in-2")
                    done = await c.of_type("turn_finished", request_id="in-2", timeout=30)
                    assert done["stop_reason"] == "end_turn"

            asyncio.run(scenario())
        finally:
            started = time.monotonic()
            code = proc.stop(signal.SIGTERM)
            stopped_in = time.monotonic() - started
    assert code == 0
    assert stopped_in < PROMPTLY
    assert recorded_result(home)["content"][0]["text"] == "Interrupted by user"
    assert checkpoint(home)[0] == "after"
    assert gone(int(mark.read_text()))


def test_app_server_abort_message_ends_a_turn_waiting_for_a_server_to_start(
    workdir: Path, tmp_path: Path
) -> None:
    from websockets.asyncio.client import connect

    from tests.server.support import Client, ServerProcess, server_env

    home, mark = tmp_path / "th", tmp_path / "mute.pid"
    mute_settings(home, mark)
    with FakeProvider([{"text": "never asked"}, {"text": "after the abort"}]) as fake:
        proc = ServerProcess(server_env(fake.url, home, tmp_path), workdir)
        try:
            async def scenario() -> None:
                async with connect(proc.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(workdir, mode="bypassPermissions"))["runtime"]
                    await c.say(runtime, "go")
                    await asyncio.to_thread(wait_for_file, mark)  # the turn waits for the server
                    await c.send({"type": "abort_message", "request_id": "ab", "runtime": runtime})
                    finished = await c.of_type("turn_finished", timeout=PROMPTLY)
                    assert finished["stop_reason"] == "cancelled"

            asyncio.run(scenario())
        finally:
            code = proc.stop(signal.SIGTERM)
        assert fake.requests == []
    assert code == 0
    assert gone(int(mark.read_text()))


def test_a_signal_while_a_server_starts_ends_the_run(workdir: Path, tether_home: Path,
                                                     tmp_path: Path) -> None:
    mark = tmp_path / "mute.pid"
    mute_settings(tether_home, mark)
    with FakeProvider([{"text": "never asked"}]) as fake:
        proc = subprocess.Popen([TETHER, "-p", "go", "--model", MODEL], cwd=workdir,
                                env=tether_env(fake.url, MODEL), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            server = wait_for_file(mark)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=PROMPTLY)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert fake.requests == []
    assert proc.returncode == 130, err
    assert "Interrupted by SIGINT" in err
    assert gone(server)


def test_stream_json_sigterm_ends_a_hung_call_and_the_session(workdir: Path, tether_home: Path,
                                                             tmp_path: Path) -> None:
    from tests.e2e.test_bidirectional import Client

    mark = tmp_path / "hang.pid"
    settings(tether_home, mark)
    with FakeProvider([HANG, {"text": "never sent"}]) as fake:
        c = Client(fake.url, workdir, "--yolo")
        try:
            c.user("go")
            server = wait_for_file(mark)
            c.proc.send_signal(signal.SIGTERM)
            code = c.proc.wait(timeout=PROMPTLY)
        finally:
            if c.proc.poll() is None:
                c.proc.kill()
            c.close()
    assert code == 143
    assert recorded_result(tether_home)["content"][0]["text"] == "Interrupted by user"
    assert checkpoint(tether_home)[0] == "after"
    assert gone(server)
