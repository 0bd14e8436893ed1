"""A seeded sweep of kill -9 points through a four-tool turn of the real `tether server`.

Each seed: a fresh TETHER_HOME, one turn whose model calls four Bash tools in sequence (each
appends `<tag> $RANDOM` to a ledger outside the workspace), SIGKILL of the server's process group
after a seeded delay, a restart on the same home, runtime_start of the same conversation (that
runs recovery) and a plain-text follow-up turn. After every restart: no effect ran twice, every
call left at `before` by the kill is answered once with the unknown outcome, no transcript line
that was on disk at the kill is lost, and every tool call has exactly one result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.support import TETHER
from tests.server.support import Client, bash, server_env
from tether.backends.local.transcript import Transcript
from tether.protocol.messages import AssistantMessage, TextPart, ToolResultMessage
from tether.runtime.turns.checkpoints import UNKNOWN_OUTCOME
from tether.testing.fake_provider import FakeProvider

TAGS = [f"sweep-call-{n}" for n in range(1, 5)]
CALL_IDS = [f"toolu_sweep_{n}" for n in range(1, 5)]
MODE = "bypassPermissions"


# read at import: the autouse conftest fixture scrubs TETHER_* from the environment of each test
POINTS = int(os.environ.get("TETHER_CRASH_POINTS", "16"))


def _script(ledger: Path) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{**bash(f"echo {tag} $RANDOM >> {ledger}; sleep 0.15"), "id": call_id}]}
        for tag, call_id in zip(TAGS, CALL_IDS, strict=True)
    ]
    return [*turns, {"text": "all four appended"}]


class _Server:
    """`tether server` in its own session, so SIGKILL can take its whole process group."""

    def __init__(self, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [TETHER, "server", "--listen", "ws://127.0.0.1:0"],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            code = self.proc.poll()
            self.close()
            raise AssertionError(f"tether server printed no URL (exit {code}): {log.read_text()}")

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        finally:
            self.close()

    def close(self) -> None:
        """Never leaves anything behind, whatever state the process is in."""
        if self.proc.poll() is None:
            self.kill_group()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def _kill_strays(marker: str) -> None:
    """Bash tool commands run in their own session (they outlive the server's group): find the
    ones of this seed by the unique ledger path in their argv and kill their groups."""
    for _ in range(3):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(int(name)), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.1)


def _complete_lines(path: Path) -> list[bytes]:
    """The LF-terminated lines of a file (a torn last line is dropped)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data.split(b"\n")[:-1]


def _before_rows(db_path: Path) -> list[str]:
    if not db_path.exists():
        return []
    db = sqlite3.connect(db_path)
    try:
        return [
            r[0]
            for r in db.execute(
                "SELECT tool_call_id FROM effect_checkpoints WHERE phase = 'before'"
            )
        ]
    except sqlite3.OperationalError:  # killed before the table was created
        return []
    finally:
        db.close()


def _ledger_counts(ledger: Path) -> dict[str, int]:
    counts = dict.fromkeys(TAGS, 0)
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            tag = line.split(" ", 1)[0]
            assert tag in counts, f"unexpected ledger line {line!r}"
            counts[tag] += 1
    return counts


def _is_subsequence(needles: list[bytes], haystack: list[bytes]) -> int:
    """How many of `needles` are missing from `haystack` when matched in order."""
    it = iter(haystack)
    return sum(1 for n in needles if not any(n == h for h in it))


@dataclass
class Tally:
    kills: int = 0
    in_effect: int = 0
    unknown_results: int = 0
    reruns: int = 0
    lost: int = 0
    notes: list[str] = field(default_factory=list)


async def _start_and_kill(server: _Server, project: Path, delay: float) -> dict[str, str]:
    async with connect(server.url, open_timeout=10) as ws:
        c = Client(ws)
        runtime = (await c.start(project, mode=MODE))["runtime"]
        await c.say(runtime, "append four lines to the ledger")
        drain = asyncio.create_task(_drain(c))  # keep reading so the server never blocks
        try:
            await asyncio.sleep(delay)
            server.kill_group()
        finally:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
        return runtime


async def _drain(c: Client) -> None:
    with contextlib.suppress(Exception):  # the kill closes the connection
        async for raw in c.ws:
            c.seen.append(json.loads(raw))


async def _recover_and_continue(
    server: _Server, project: Path, runtime: dict[str, str]
) -> tuple[dict[str, Any], str]:
    async with connect(server.url, open_timeout=10) as ws:
        c = Client(ws)
        started = await c.start(project, mode=MODE, **runtime)
        await c.say(runtime, "continue", request_id="after-crash")
        finished = await c.of_type("turn_finished", timeout=30, request_id="after-crash")
        return started, finished["stop_reason"]


async def _full_turn(server: _Server, project: Path) -> float:
    async with connect(server.url, open_timeout=10) as ws:
        c = Client(ws)
        runtime = (await c.start(project, mode=MODE))["runtime"]
        t0 = time.monotonic()
        await c.say(runtime, "append four lines to the ledger")
        finished = await c.of_type("turn_finished", timeout=60, request_id="in-1")
        assert finished["stop_reason"] == "end_turn", finished
        return time.monotonic() - t0


def _text(message: ToolResultMessage) -> str:
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


def _transcript(home: Path) -> Path:
    files = sorted(home.glob("conversations/*/messages.jsonl"))
    assert len(files) == 1, files
    return files[0]


def _calibrate(tmp: Path) -> float:
    """One turn that is not killed: the happy path works and tells how long a turn takes."""
    home, project, ledger = tmp / "home", tmp / "project", tmp / "ledger.txt"
    project.mkdir(parents=True)
    with FakeProvider(_script(ledger)) as fake:
        server = _Server(server_env(fake.url, home, tmp), project, tmp / "server.log")
        try:
            duration = asyncio.run(_full_turn(server, project))
            assert server.stop() == 0
        finally:
            server.close()
            _kill_strays(str(ledger))
        assert fake.violations == []
    assert _ledger_counts(ledger) == dict.fromkeys(TAGS, 1)
    return duration


def _one_seed(seed: int, tmp: Path, spread: float, tally: Tally) -> None:
    home, project, ledger = tmp / "home", tmp / "project", tmp / "ledger.txt"
    project.mkdir(parents=True)
    delay = random.Random(seed).uniform(0.0, spread)
    where = f"seed {seed} (kill after {delay:.3f}s, logs in {tmp})"
    with FakeProvider(_script(ledger)) as fake:
        env = server_env(fake.url, home, tmp)
        first = _Server(env, project, tmp / "server-1.log")
        try:
            runtime = asyncio.run(_start_and_kill(first, project, delay))
            code = first.proc.wait(timeout=20)
        finally:
            first.close()
            _kill_strays(str(ledger))
        assert code == -signal.SIGKILL, f"{where}: server exited {code} before the kill"
        tally.kills += 1

        # the state the kill left, read before anything can repair it
        open_before = _before_rows(home / "checkpoints.db")
        transcripts = sorted(home.glob("conversations/*/messages.jsonl"))
        at_kill = _complete_lines(transcripts[0]) if transcripts else []
        ledger_at_kill = _ledger_counts(ledger)
        tally.in_effect += len(open_before)
        assert all(n <= 1 for n in ledger_at_kill.values()), f"{where}: {ledger_at_kill}"

        fake.set_script([{"text": "carrying on"}])
        second = _Server(env, project, tmp / "server-2.log")
        try:
            started, stop_reason = asyncio.run(_recover_and_continue(second, project, runtime))
            assert second.stop() == 0, f"{where}: restarted server did not exit cleanly"
        finally:
            second.close()
            _kill_strays(str(ledger))
        assert stop_reason == "end_turn", f"{where}: follow-up stopped with {stop_reason}"
        assert fake.violations == [], f"{where}: provider refused a history {fake.violations}"

    # (1) no effect ran twice, also after the follow-up turn
    final_ledger = _ledger_counts(ledger)
    reruns = sum(n - 1 for n in final_ledger.values() if n > 1)
    tally.reruns += reruns
    assert reruns == 0, f"{where}: ledger {final_ledger}"

    path = _transcript(home)
    view = Transcript(path).load()
    results: dict[str, list[ToolResultMessage]] = {}
    for m in view:
        if isinstance(m, ToolResultMessage):
            results.setdefault(m.tool_call_id, []).append(m)
    unknown = [cid for cid, rs in results.items() if any(_text(r) == UNKNOWN_OUTCOME for r in rs)]
    tally.unknown_results += len(unknown)

    # (2) every call left at `before` is answered once, with the unknown outcome, and ran <= once
    for cid in open_before:
        got = results.get(cid, [])
        assert len(got) == 1 and _text(got[0]) == UNKNOWN_OUTCOME, f"{where}: {cid} -> {got}"
        assert final_ledger[TAGS[CALL_IDS.index(cid)]] <= 1, f"{where}: {final_ledger}"
    recovered = {
        e["tool_call_id"] for e in started["recovered_effects"] if e["outcome"] == "unknown"
    }
    assert recovered == set(open_before), f"{where}: recovered {recovered} vs {open_before}"
    assert set(unknown) == set(open_before), f"{where}: unknown {unknown} vs {open_before}"

    # (3) nothing committed at the kill is lost: those lines are all still there, in order
    after = _complete_lines(path)
    lost = _is_subsequence(at_kill, after)
    tally.lost += lost
    assert lost == 0, f"{where}: {lost} transcript lines lost"

    # (4) every tool call in the final transcript has exactly one result
    calls = [c.id for m in view if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert len(calls) == len(set(calls)), f"{where}: duplicate calls {calls}"
    for cid in calls:
        assert len(results.get(cid, [])) == 1, f"{where}: {cid} has {results.get(cid)}"
    assert set(results) <= set(calls), f"{where}: results without a call {sorted(results)}"
    tally.notes.append(
        f"seed {seed}: {delay:.2f}s, {len(calls)} calls, before={open_before}, "
        f"ledger={sum(final_ledger.values())} {json.dumps(sorted(results))}"
    )


def test_crash_sweep_never_reruns_or_loses(tmp_path: Path) -> None:
    duration = _calibrate(tmp_path / "calibrate")
    spread = max(duration, 0.6)
    tally = Tally()
    for seed in range(POINTS):
        _one_seed(seed, tmp_path / f"seed-{seed}", spread, tally)
    for note in tally.notes:
        print(note)
    print(
        f"crash sweep: {tally.kills} kills, {tally.in_effect} inside an effect window"
        f" (unknown outcomes), {tally.unknown_results} unknown results recorded,"
        f" {tally.reruns} re-runs, {tally.lost} lost entries (turn {duration:.2f}s)"
    )
    assert tally.kills == POINTS
    assert tally.in_effect == tally.unknown_results
    assert tally.reruns == 0 and tally.lost == 0
