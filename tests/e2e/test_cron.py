"""`tether cron` end to end: the real command in a subprocess, the store on disk."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cron_support import (
    MIN,
    T0,
    Clock,
    add_task,
    cron,
    new_agent,
    ok,
    prompts,
    scheduled_env,
    settle,
    wait_until,
)
from tether.backends.local.store import LocalStore


@pytest.fixture
def agent(tether_home: Path) -> str:
    return new_agent(tether_home)


def test_add_list_get_runs_delete(tether_home: Path, agent: str) -> None:
    task = add_task(
        tether_home,
        agent,
        "tidy",
        "tidy up",
        "--every",
        "5m",
        "--timezone",
        "Europe/Berlin",
        "--description",
        "d",
    )
    assert task["status"] == "active" and task["cron"] == "*/5 * * * *" and task["recurring"]
    assert task["conversation_id"] == "new" and task["timezone"] == "Europe/Berlin"
    assert len(task["id"]) == 8 and int(task["id"], 16) >= 0
    one = add_task(tether_home, agent, "once", "p", "--at", "in 45m", conversation="default")
    assert not one["recurring"] and one["scheduled_for"]
    listed = ok(cron("list", home=tether_home))
    assert [t["id"] for t in listed] == [task["id"], one["id"]]
    assert ok(cron("list", "--agent", "agent-local-nobody", home=tether_home)) == []
    assert ok(cron("get", task["id"], home=tether_home)) == task
    assert ok(cron("runs", task["id"], home=tether_home)) == []
    gone = ok(cron("delete", task["id"], home=tether_home))
    assert gone == {"deleted": True, "id": task["id"], "name": "tidy"}
    assert ok(cron("remove", one["id"], home=tether_home))["deleted"]
    missing = cron("get", task["id"], home=tether_home)
    assert missing.returncode == 1 and f"no scheduled task '{task['id']}'" in missing.stderr
    # on disk: SQLite under TETHER_HOME, owner-only
    db = tether_home / "cron.db"
    assert db.is_file() and (db.stat().st_mode & 0o077) == 0
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM tasks").fetchone() == (0,)


def test_agent_from_the_agents_shell(tether_home: Path, agent: str) -> None:
    task = ok(
        cron(
            "add",
            "--name",
            "self",
            "--prompt",
            "p",
            "--cron",
            "0 9 * * 1-5",
            home=tether_home,
            extra={"TETHER_AGENT_ID": agent},
        )
    )
    assert task["agent_id"] == agent and task["cron"] == "0 9 * * 1-5"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--name", "n", "--prompt", "p", "--every", "5m"], "needs --agent"),
        (
            ["--agent", "agent-local-missing", "--name", "n", "--prompt", "p", "--every", "5m"],
            "No agent 'agent-local-missing'",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
                "--cron",
                "* * * * *",
            ],
            "exactly one of --every",
        ),
        (["--agent", "{agent}", "--name", "n", "--prompt", "p", "--cron", "* * *"], "5 fields"),
        (
            ["--agent", "{agent}", "--name", "n", "--prompt", "p", "--at", "noonish"],
            "--at 'noonish'",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
                "--timezone",
                "Nowhere/X",
            ],
            "not an IANA time zone",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--conversation",
                "local-conv-999",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
            ],
            "No conversation 'local-conv-999'",
        ),
        (["--agent", "{agent}", "--name", " ", "--prompt", "p", "--every", "5m"], "--name must"),
    ],
)
def test_bad_input_is_named(tether_home: Path, agent: str, args: list[str], why: str) -> None:
    proc = cron("add", *[a.replace("{agent}", agent) for a in args], home=tether_home)
    assert proc.returncode == 1 and why in proc.stderr and proc.stdout == ""
    assert not (tether_home / "cron.db").exists() or ok(cron("list", home=tether_home)) == []


def test_trigger_without_a_running_server_says_how_to_start_one(
    tether_home: Path, agent: str
) -> None:
    task = add_task(tether_home, agent, "n", "p", "--every", "1h")
    proc = cron("trigger", task["id"], home=tether_home)
    assert proc.returncode == 1 and "start `tether server`" in proc.stderr
    proc = cron("trigger", "deadbeef", home=tether_home)
    assert proc.returncode == 1 and "no scheduled task 'deadbeef'" in proc.stderr


# --- the scheduler inside a real `tether server` --------------------------------------------------


@pytest.fixture
def clock(tmp_path: Path) -> Clock:
    return Clock(tmp_path / "clock")


@pytest.fixture
def home_dir(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir(exist_ok=True)
    return tmp_path / "tether-home"


def test_every_minute_fires_into_a_new_conversation_with_no_client(
    tmp_path: Path, workdir: Path, home_dir: Path, agent: str, clock: Clock
) -> None:
    from tests.server.support import ServerProcess
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "checked"}] * 3) as fake:
        env = scheduled_env(fake.url, home_dir, tmp_path, clock)
        task = add_task(
            home_dir,
            agent,
            "heartbeat",
            "check the build",
            "--every",
            "1m",
            "--timezone",
            "UTC",
            extra=env,
        )
        server = ServerProcess(env, workdir)
        try:
            clock.set(T0 + MIN - 10_000 + task["jitter_offset_ms"] - 1)  # one ms before it is due
            settle()
            assert fake.requests == []
            clock.advance(1)
            wait_until(lambda: len(fake.requests) == 1, what="the first fire")
            [text] = prompts(fake)
            assert text.startswith('Scheduled task "heartbeat" is firing.')
            assert "Prompt: check the build" in text and "(fire #1)" in text
            settle()
            assert len(fake.requests) == 1  # one fire per slot
            clock.advance(MIN)
            wait_until(lambda: len(fake.requests) == 2, what="the second fire")
            assert "(fire #2)" in prompts(fake)[1]
            wait_until(lambda: len(ok(cron("runs", task["id"], home=home_dir, extra=env))) == 2)
            runs = ok(cron("runs", task["id"], home=home_dir, extra=env))
            assert [(r["outcome"], r["reason"]) for r in runs] == [
                ("queued", "scheduled_time_matched")
            ] * 2
            conversations = {r["conversationId"] for r in runs}
            assert len(conversations) == 2  # `new`: a fresh conversation per fire
            store = LocalStore(home_dir)
            for conv in conversations:
                record = store.get_conversation(conv, agent)
                assert "origin:schedule" in record.extra["tags"]
            got = ok(cron("get", task["id"], home=home_dir, extra=env))
            assert got["fire_count"] == 2 and got["last_run_outcome"] == "queued"
        finally:
            assert server.stop() == 0
        assert fake.violations == []


def test_one_shot_fires_once_and_a_deleted_task_never(
    tmp_path: Path, workdir: Path, home_dir: Path, agent: str, clock: Clock
) -> None:
    from tests.server.support import ServerProcess
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "done"}] * 3) as fake:
        env = scheduled_env(fake.url, home_dir, tmp_path, clock)
        once = add_task(
            home_dir,
            agent,
            "once",
            "one time only",
            "--at",
            "in 5m",
            conversation="default",
            extra=env,
        )
        gone = add_task(home_dir, agent, "gone", "never say this", "--every", "1m", extra=env)
        ok(cron("delete", gone["id"], home=home_dir, extra=env))
        server = ServerProcess(env, workdir)
        try:
            clock.advance(5 * MIN)
            wait_until(lambda: len(fake.requests) == 1, what="the one-shot")
            for _ in range(3):
                clock.advance(10 * MIN)
                settle()
            texts = prompts(fake)
            assert len(texts) == 1 and "Prompt: one time only" in texts[0]
            assert "one-off" in texts[0]
            assert not any("never say this" in t for t in texts)
            got = ok(cron("get", once["id"], home=home_dir, extra=env))
            assert got["status"] == "fired" and got["fire_count"] == 1
            db = sqlite3.connect(home_dir / "cron.db")
            assert db.execute(
                "SELECT COUNT(*) FROM runs WHERE task_id = ?", (gone["id"],)
            ).fetchone() == (0,)
            # the default conversation got it
            transcript = LocalStore(home_dir).transcript(agent, "default").load()
            assert any("one time only" in str(m) for m in transcript)
        finally:
            assert server.stop() == 0


def test_two_servers_on_one_home_fire_each_slot_once(
    tmp_path: Path, workdir: Path, home_dir: Path, agent: str, clock: Clock
) -> None:
    from tests.server.support import ServerProcess
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "tick"}] * 10) as fake:
        env = scheduled_env(fake.url, home_dir, tmp_path, clock)
        task = add_task(home_dir, agent, "tick", "tick", "--every", "1m", extra=env)
        servers = [ServerProcess(env, workdir), ServerProcess(env, workdir)]
        try:
            for n in range(1, 4):
                clock.advance(MIN)
                wait_until(lambda n=n: len(fake.requests) >= n, what=f"fire {n}")
                settle()
                assert len(fake.requests) == n
            runs = ok(cron("runs", task["id"], home=home_dir, extra=env))
            assert [r["outcome"] for r in runs] == ["queued"] * 3
        finally:
            for server in servers:
                assert server.stop() == 0


def test_trigger_runs_a_task_now_from_the_cli_and_over_the_wire(
    tmp_path: Path, workdir: Path, home_dir: Path, agent: str, clock: Clock
) -> None:
    import asyncio

    from websockets.asyncio.client import connect

    from tests.server.support import ServerProcess
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "ran"}] * 3) as fake:
        env = scheduled_env(fake.url, home_dir, tmp_path, clock)
        task = add_task(home_dir, agent, "nightly", "run it now", "--cron", "0 3 * * *", extra=env)
        server = ServerProcess(env, workdir)
        try:
            wait_until(
                lambda: (
                    cron("trigger", task["id"], "--no-wait", home=home_dir, extra=env).returncode
                    == 0
                ),
                what="the scheduler's lease",
            )
            wait_until(lambda: len(fake.requests) == 1, what="the CLI trigger")
            assert "Prompt: run it now" in prompts(fake)[0]
            answer = ok(cron("trigger", task["id"], home=home_dir, extra=env))
            assert answer["outcome"] == "queued" and answer["reason"] == "manual_trigger"
            wait_until(lambda: len(fake.requests) == 2, what="the waited trigger")

            async def over_the_wire() -> list[dict[str, Any]]:
                async with connect(server.url) as ws:
                    await ws.send(
                        json.dumps(
                            {"type": "cron_trigger", "request_id": "t1", "task_id": task["id"]}
                        )
                    )
                    await ws.send(
                        json.dumps(
                            {"type": "cron_trigger", "request_id": "t2", "task_id": "00000000"}
                        )
                    )
                    seen: list[dict[str, Any]] = []
                    while sum(f["type"] == "cron_trigger_response" for f in seen) < 2:
                        seen.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
                    return seen

            seen = asyncio.run(over_the_wire())
            assert {"type": "crons_updated"} in seen  # connected clients hear of the run
            frames = [f for f in seen if f["type"] == "cron_trigger_response"]
            by_id = {f["request_id"]: f for f in frames}
            assert by_id["t1"]["success"] and by_id["t1"]["outcome"] == "queued"
            assert (
                by_id["t2"]["success"] is False
                and "no active scheduled task" in by_id["t2"]["error"]
            )
            wait_until(lambda: len(fake.requests) == 3, what="the v2 trigger")
            got = ok(cron("get", task["id"], home=home_dir, extra=env))
            assert got["status"] == "active" and got["fire_count"] == 3
        finally:
            assert server.stop() == 0


def test_a_full_conversation_queue_is_recorded_and_the_task_kept(
    tmp_path: Path, workdir: Path, home_dir: Path, agent: str, clock: Clock
) -> None:
    from tests.server.support import ServerProcess
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "slow", "delay_ms": 4000}, {"text": "next"}]) as fake:
        env = scheduled_env(fake.url, home_dir, tmp_path, clock)
        task = add_task(
            home_dir, agent, "busy", "work", "--every", "1h", conversation="default", extra=env
        )
        server = ServerProcess(env, workdir, "--max-queue", "1")
        try:
            wait_until(
                lambda: cron("trigger", task["id"], home=home_dir, extra=env).returncode == 0,
                what="the first run",
            )
            wait_until(lambda: len(fake.requests) == 1, what="the first turn to start")
            assert ok(cron("trigger", task["id"], home=home_dir, extra=env))["outcome"] == "queued"
            full = cron("trigger", task["id"], home=home_dir, extra=env)
            assert full.returncode == 1, full.stderr
            answer = json.loads(full.stdout)
            assert (answer["outcome"], answer["reason"]) == ("failed", "queue_full")
            assert "queue of default is full" in answer["error"]
            wait_until(lambda: len(fake.requests) == 2, what="the queued prompt to run")
            runs = ok(cron("runs", task["id"], home=home_dir, extra=env))
            assert [r["outcome"] for r in runs] == ["queued", "queued", "failed"]
            got = ok(cron("get", task["id"], home=home_dir, extra=env))
            assert got["status"] == "active" and got["failed_count"] == 1 and got["fire_count"] == 2
        finally:
            assert server.stop() == 0


def test_a_scoped_token_triggers_only_its_own_agents_tasks_and_learns_nothing_else(
    tmp_path: Path, workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import time

    import jwt

    from tests.server.support import Client, InProcess, point_at
    from tether.server import auth
    from tether.testing.fake_provider import FakeProvider

    secret = b"k" * 32
    store = LocalStore(tether_home)
    mine = store.create_agent(model="anthropic/claude-test", system="s").id
    other = store.create_agent(model="anthropic/claude-test", system="s").id
    tasks = {
        name: add_task(
            tether_home, agent, name, f"prompt of {name}", "--every", "1h", conversation=conv
        )["id"]
        for name, agent, conv in (
            ("own", mine, "default"),
            ("others", other, "default"),
            ("own-new", mine, "new"),
        )
    }

    def bearer(**scope: Any) -> dict[str, str]:
        claims = {"exp": time.time() + 300, **scope}
        return {"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm='HS256')}"}

    async def trigger(srv: InProcess, headers: dict[str, str], task_id: str) -> dict[str, Any]:
        async with srv.connect(additional_headers=headers) as ws:
            c = Client(ws)
            await c.send({"type": "cron_trigger", "request_id": "t", "task_id": task_id})
            return await c.of_type("cron_trigger_response")

    with FakeProvider([{"text": "ran"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> dict[str, dict[str, Any]]:
            policy = auth.AuthPolicy("signed-bearer-token", secret=secret)
            async with InProcess(workdir, policy=policy) as srv:
                assert srv.server is not None
                srv.server.start_scheduler()
                agent_scoped = bearer(agents=[mine])
                conv_scoped = bearer(agents=[mine], conversations=["default"])
                return {
                    "others": await trigger(srv, agent_scoped, tasks["others"]),
                    "unknown": await trigger(srv, agent_scoped, "00c0ffee"),
                    "own-new by conversation scope": await trigger(
                        srv, conv_scoped, tasks["own-new"]
                    ),
                    "own": await trigger(srv, agent_scoped, tasks["own"]),
                }

        answers = asyncio.run(scenario())
        sent = json.dumps([r["body"] for r in fake.requests])
    assert "prompt of others" not in sent and "prompt of own-new" not in sent
    assert answers["own"]["success"] and answers["own"]["outcome"] == "queued"
    for why in ("others", "unknown", "own-new by conversation scope"):
        assert answers[why]["success"] is False, why
        assert answers[why]["error"].startswith("no active scheduled task"), why
    assert answers["others"]["error"] == answers["unknown"]["error"].replace(
        "00c0ffee", tasks["others"]
    )  # no oracle: the same words as for an id that never was
    assert [r["outcome"] for r in ok(cron("runs", tasks["own"], home=tether_home))] == ["queued"]
    for name in ("others", "own-new"):
        assert ok(cron("runs", tasks[name], home=tether_home)) == []
