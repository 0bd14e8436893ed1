"""The App Server over real websockets and HTTP on loopback, against the fake provider."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.server.support import (
    UPGRADE,
    Client,
    InProcess,
    ServerProcess,
    bash,
    point_at,
    raw_http,
    server_env,
)
from tether.server import auth
from tether.testing.fake_provider import FakeProvider

TOKEN = "server-test-token"


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def token_policy() -> auth.AuthPolicy:
    return auth.AuthPolicy("capability-token", token_sha256=hashlib.sha256(TOKEN.encode()).digest())


# --- HTTP and the handshake -------------------------------------------------------------------


def test_health_info_and_routing(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            for path in ("/healthz", "/readyz"):
                assert await raw_http(srv.port, f"GET {path} HTTP/1.1") == (200, "ok\n")
            status, body = await raw_http(srv.port, "GET /app-server-info HTTP/1.1")
            info = json.loads(body)
            assert (
                status == 200
                and info["type"] == "app_server_info_response"
                and info["success"] is True
            )
            assert info["protocol_version"] == 1 and info["backend"] == "local"
            assert (
                info["capabilities"]["runtime_start"] is True
                and info["capabilities"]["split_channels"] is False
            )
            assert (await raw_http(srv.port, "GET /nowhere HTTP/1.1"))[0] == 404
            assert (await raw_http(srv.port, "GET /ws?channel=stream HTTP/1.1", UPGRADE))[0] == 426
            assert (await raw_http(srv.port, "GET /ws HTTP/1.1"))[0] == 426  # not an upgrade
            assert srv.url.endswith("/ws")
            async with srv.connect() as ws:  # "/" upgrades as well as the configured path
                await ws.send(json.dumps({"type": "app_server_info", "request_id": "a"}))
                assert json.loads(await ws.recv())["request_id"] == "a"

    run(scenario())


def test_bearer_required_before_upgrade(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project, policy=token_policy()) as srv:
            for headers, message in (
                (None, auth.MISSING_TOKEN),
                ({"Authorization": "Bearer wrong"}, auth.INVALID_TOKEN),
                ({"Authorization": "Bearer"}, auth.INVALID_HEADER),
            ):
                with pytest.raises(InvalidStatus) as err:
                    async with srv.connect(additional_headers=headers):
                        pass
                assert err.value.response.status_code == 401
                assert err.value.response.body.decode().strip() == message
            assert (await raw_http(srv.port, "GET /ws?token=a&token=b HTTP/1.1", UPGRADE))[
                0
            ] == 401  # e5
            assert (await raw_http(srv.port, "GET /app-server-info HTTP/1.1"))[0] == 401
            status, body = await raw_http(
                srv.port, "GET /app-server-info HTTP/1.1", {"Authorization": f"Bearer {TOKEN}"}
            )
            assert status == 200 and json.loads(body)["success"] is True
            assert (await raw_http(srv.port, "GET /healthz HTTP/1.1"))[
                0
            ] == 200  # health needs no token
            async with srv.connect(additional_headers={"Authorization": f"bearer {TOKEN}"}) as ws:
                await ws.send(json.dumps({"type": "app_server_info", "request_id": "ok"}))
                assert json.loads(await ws.recv())["type"] == "app_server_info_response"

    run(scenario())


def test_origin_forbidden_unless_bearer_valid(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            for origin in ("https://evil.example", "null", "file://"):
                with pytest.raises(InvalidStatus) as err:
                    async with srv.connect(origin=origin):
                        pass
                assert err.value.response.status_code == 403
            assert (
                await raw_http(
                    srv.port, "GET /healthz HTTP/1.1", {"Origin": "https://evil.example"}
                )
            )[0] == 403
        async with InProcess(project, policy=token_policy()) as srv:
            with pytest.raises(InvalidStatus) as err:
                async with srv.connect(origin="https://evil.example"):
                    pass
            assert err.value.response.status_code == 403
            async with srv.connect(
                origin="https://app.example",
                additional_headers={"Authorization": f"Bearer {TOKEN}"},
            ):
                pass

    run(scenario())


def test_dns_rebinding_host_forbidden(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            for host in (f"rebind.evil.example:{srv.port}", "127.0.0.1:1", "evil.example"):
                assert (await raw_http(srv.port, "GET /ws HTTP/1.1", UPGRADE, host=host))[0] == 403
                assert (await raw_http(srv.port, "GET /healthz HTTP/1.1", host=host))[0] == 403
            assert (
                await raw_http(srv.port, "GET /healthz HTTP/1.1", host=f"localhost:{srv.port}")
            )[0] == 200

    run(scenario())


def test_oversized_frame_closes_the_connection(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project, max_frame_bytes=4096) as srv:
            async with srv.connect(max_size=None) as ws:
                await ws.send("x" * 10_000)
                with pytest.raises(ConnectionClosed) as err:
                    await asyncio.wait_for(ws.recv(), 10)
                assert err.value.rcvd is not None and err.value.rcvd.code == 1009
            async with srv.connect() as ws:  # the server lives on
                await ws.send(json.dumps({"type": "app_server_info", "request_id": "b"}))
                assert json.loads(await ws.recv())["request_id"] == "b"

    run(scenario())


def test_bad_frames_get_errors_and_the_connection_stays(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            cases = [
                ("{not json", "not valid JSON"),
                ("[1, 2]", "must be a JSON object"),
                ({"type": "frobnicate"}, "unknown frame type 'frobnicate'"),
                ({"request_id": "r"}, "needs a string 'type'"),
                ({"type": "runtime_start"}, "'request_id' is required"),
                (
                    {"type": "runtime_start", "request_id": "r"},
                    "exactly one of 'agent_id' or 'create_agent'",
                ),
                ({"type": "input", "payload": {}}, "'runtime' is required"),
                (
                    {"type": "input", "runtime": {"agent_id": "a"}, "payload": {}},
                    "'runtime.conversation_id' is required",
                ),
                (
                    {
                        "type": "input",
                        "runtime": {"agent_id": "a", "conversation_id": "c"},
                        "payload": {"kind": "x"},
                    },
                    "'payload.kind' must be",
                ),
                (
                    {
                        "type": "input",
                        "runtime": {"agent_id": "a", "conversation_id": "c"},
                        "payload": {"kind": "create_message", "messages": []},
                    },
                    "'payload.messages' must be a non-empty list",
                ),
                (
                    {"type": "sync", "runtime": {"agent_id": "a", "conversation_id": "c"}},
                    "send runtime_start first",
                ),
            ]
            for frame, needle in cases:
                await c.send(frame)
                err = await c.of_type("error")
                assert needle in err["message"], (frame, err)
            await c.send({"type": "runtime_start", "request_id": "r9", "agent_id": "agent-nope"})
            failed = await c.of_type("runtime_start_response")
            assert failed["success"] is False and "No agent 'agent-nope'" in failed["error"]
            await c.send({"type": "app_server_info", "request_id": "still-here"})
            assert (await c.of_type("app_server_info_response"))["request_id"] == "still-here"

    run(scenario())


# --- turns ---------------------------------------------------------------------------------


def test_text_turn_frames(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(fake: FakeProvider) -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            started = await c.start(project)
            runtime = started["runtime"]
            assert started["created"] == {"agent": True, "conversation": True}
            assert runtime["conversation_id"].startswith("local-conv-")
            await c.say(runtime, "hi")
            accepted = await c.of_type("input_accepted")
            assert accepted["accepted"] is True and accepted["disposition"] == "started"
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "end_turn" and finished["run_id"].startswith(
                "local-run-"
            )
            assert "error" not in finished
            text = "".join(d["content"] for d in c.deltas("assistant_message"))
            assert text == "hello from the server"
            assert all(
                d["type"] == "message" and d["conversation_id"] == runtime["conversation_id"]
                for d in c.deltas("assistant_message")
            )
            scoped = [f for f in c.seen if "event_seq" in f]
            seqs = [f["event_seq"] for f in scoped]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            assert all(
                f["runtime"] == runtime and f["emitted_at"] and f["idempotency_key"] for f in scoped
            )
            statuses = [
                f["loop_status"]["status"] for f in c.seen if f["type"] == "update_loop_status"
            ]
            assert statuses[0] == "WAITING_ON_INPUT" and "SENDING_API_REQUEST" in statuses
            assert "PROCESSING_API_RESPONSE" in statuses and statuses[-1] == "WAITING_ON_INPUT"
            assert {"update_device_status", "update_queue"} <= {f["type"] for f in c.seen}

    with FakeProvider([{"text": "hello from the server"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario(fake))
        assert len(fake.requests) == 1 and fake.violations == []


def test_bash_approval_round_trip(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "make a file")
            req = await c.of_type("control_request")
            body = req["request"]
            assert body["subtype"] == "can_use_tool" and body["tool_name"] == "Bash"
            assert body["input"]["command"] == "echo approved > out.txt"
            assert req["request_id"] == f"perm-{body['tool_call_id']}"
            assert (
                req["agent_id"] == runtime["agent_id"]
                and req["conversation_id"] == runtime["conversation_id"]
            )
            assert not (project / "out.txt").exists()  # nothing runs before the answer
            waiting = [f for f in c.seen if f["type"] == "update_loop_status"][-1]
            assert waiting["loop_status"]["status"] == "WAITING_ON_APPROVAL"
            await c.answer(runtime, req["request_id"])
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "end_turn"
            returns = c.deltas("tool_return_message")
            assert returns and returns[0]["status"] == "success"
            executing = [
                f["loop_status"]
                for f in c.seen
                if f["type"] == "update_loop_status"
                and f["loop_status"]["status"] == "EXECUTING_CLIENT_SIDE_TOOL"
            ]
            assert executing and executing[0]["executing_tool_call_ids"] == [body["tool_call_id"]]
            await c.answer(runtime, req["request_id"])  # answering twice is an error, not a re-run
            assert "no pending approval request" in (await c.of_type("error"))["message"]

    script = [{"tool_calls": [bash("echo approved > out.txt")]}, {"text": "file made"}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert fake.violations == [] and len(fake.requests) == 2
    assert (project / "out.txt").read_text() == "approved\n"


def test_deny_answers_the_model(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "try")
            req = await c.of_type("control_request")
            await c.answer(runtime, req["request_id"], "deny", message="not today")
            assert (await c.of_type("turn_finished"))["stop_reason"] == "end_turn"

    with FakeProvider([{"tool_calls": [bash("touch nope.txt")]}, {"text": "ok"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert "not today" in json.dumps(fake.requests[1]["body"])
    assert not (project / "nope.txt").exists()


def test_two_clients_one_conversation_second_input_queued(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws_a, srv.connect() as ws_b:
            a, b = Client(ws_a), Client(ws_b)
            runtime = (await a.start(project))["runtime"]
            joined = await b.start(
                project, agent_id=runtime["agent_id"], conversation_id=runtime["conversation_id"]
            )
            assert joined["runtime"] == runtime and joined["created"] == {
                "agent": False,
                "conversation": False,
            }
            await a.say(runtime, "first", request_id="a-1")
            assert (await a.of_type("input_accepted"))["disposition"] == "started"
            await b.wait_for(
                lambda f: (
                    f["type"] == "update_loop_status"
                    and f["loop_status"]["status"] != "WAITING_ON_INPUT"
                )
            )
            await b.say(runtime, "second", request_id="b-1")
            queued = await b.of_type("input_accepted")
            assert queued["disposition"] == "queued"
            update = await a.wait_for(lambda f: f["type"] == "update_queue" and f["queue"])
            assert (
                update["queue"][0]["content"] == "second"
                and update["queue"][0]["id"] == queued["queue_item_id"]
            )
            first = await a.of_type("turn_finished", request_id="a-1")
            second = await a.of_type("turn_finished", request_id="b-1")
            assert first["stop_reason"] == second["stop_reason"] == "end_turn"
            # both clients saw one sequence of frames for the runtime, with the same event_seq
            await b.of_type("turn_finished", request_id="b-1")
            seq_a = {f["event_seq"]: f["type"] for f in a.seen if f.get("type") == "turn_finished"}
            seq_b = {f["event_seq"]: f["type"] for f in b.seen if f.get("type") == "turn_finished"}
            assert seq_a == seq_b and len(seq_a) == 2
            # not interleaved: the second turn started after the first finished
            texts = [d["content"] for d in a.deltas("assistant_message")]
            assert "".join(texts) == "first answersecond answer"

    script = [{"text": "first answer", "delay_ms": 400}, {"text": "second answer"}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert len(fake.requests) == 2 and fake.violations == []
        second_body = json.dumps(fake.requests[1]["body"])
        assert "first answer" in second_body  # the second turn saw the first one's history


def test_repeated_request_id_is_not_run_twice(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "once", request_id="same")
            first = await c.of_type("input_accepted")
            await c.say(runtime, "once", request_id="same")
            again = await c.of_type("input_accepted")
            assert again["duplicate"] is True and again["queue_item_id"] == first["queue_item_id"]
            await c.of_type("turn_finished")
            await asyncio.sleep(0.3)
            assert sum(1 for f in c.seen if f["type"] == "turn_finished") == 1

    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert len(fake.requests) == 1


def test_abort_kills_the_running_tool_group(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project, mode="bypassPermissions"))["runtime"]
            await c.say(runtime, "go")
            pid_file = project / "child.pid"
            deadline = time.monotonic() + 20
            while (
                not (pid_file.exists() and pid_file.read_text().strip())
                and time.monotonic() < deadline
            ):
                await asyncio.sleep(0.05)
            child = int(pid_file.read_text())
            await c.send({"type": "abort_message", "request_id": "ab", "runtime": runtime})
            assert (await c.of_type("abort_message_response"))["aborted"] is True
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "cancelled"
            await asyncio.sleep(0.3)
            assert not _alive(child)
            await c.say(runtime, "again", request_id="in-2")
            assert (await c.of_type("turn_finished", request_id="in-2"))[
                "stop_reason"
            ] == "end_turn"

    script = [
        {"tool_calls": [bash("sleep 60 & echo $! > child.pid; wait")]},
        {"text": "after abort"},
    ]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert fake.violations == []


def test_change_device_state_mode_and_cwd(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()

    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            status = (await c.of_type("update_device_status"))["device_status"]
            assert status["current_permission_mode"] == "default"
            await c.send(
                {
                    "type": "change_device_state",
                    "request_id": "m",
                    "runtime": runtime,
                    "payload": {"mode": "bypassPermissions", "cwd": str(other)},
                }
            )
            status = await c.wait_for(
                lambda f: (
                    f["type"] == "update_device_status"
                    and f["device_status"]["current_permission_mode"] == "bypassPermissions"
                )
            )
            assert status["device_status"]["current_working_directory"] == str(other)
            await c.send(
                {"type": "change_device_state", "runtime": runtime, "payload": {"mode": "wild"}}
            )
            assert "Invalid permission mode" in (await c.of_type("error"))["message"]
            await c.send(
                {"type": "change_device_state", "runtime": runtime, "payload": {"cwd": "relative"}}
            )
            assert "absolute path" in (await c.of_type("error"))["message"]
            await c.say(runtime, "write")
            assert (await c.of_type("turn_finished"))["stop_reason"] == "end_turn"
            assert not [f for f in c.seen if f["type"] == "control_request"]  # unrestricted now
            await c.send({"type": "sync", "runtime": runtime})
            assert (await c.of_type("update_queue"))["queue"] == []

    with FakeProvider([{"tool_calls": [bash("echo here > where.txt")]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
    assert (other / "where.txt").read_text() == "here\n" and not (project / "where.txt").exists()


def test_real_server_subprocess_turn_and_sigterm(project: Path, tmp_path: Path) -> None:
    with FakeProvider([{"text": "from the subprocess"}]) as fake:
        proc = ServerProcess(server_env(fake.url, tmp_path / "th", tmp_path), project)
        try:
            assert proc.url.startswith("ws://127.0.0.1:") and proc.url.endswith("/ws")

            async def scenario() -> None:
                from websockets.asyncio.client import connect

                async with connect(proc.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(project))["runtime"]
                    await c.say(runtime, "hi")
                    assert (await c.of_type("turn_finished"))["stop_reason"] == "end_turn"
                    assert (
                        "".join(d["content"] for d in c.deltas("assistant_message"))
                        == "from the subprocess"
                    )

            run(scenario())
        finally:
            code = proc.stop(signal.SIGTERM)
        assert code == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_pending_approval_survives_a_reconnect(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            async with srv.connect() as ws:
                first = Client(ws)
                runtime = (await first.start(project))["runtime"]
                await first.say(runtime, "go")
                asked = await first.of_type("control_request")
            async with srv.connect() as ws:  # the first client is gone; a new one picks up
                again = Client(ws)
                await again.start(project, **runtime)
                resent = await again.of_type("control_request")
                assert resent["request_id"] == asked["request_id"]
                status = next(f for f in again.seen if f["type"] == "update_device_status")
                assert [
                    p["request_id"] for p in status["device_status"]["pending_control_requests"]
                ] == [asked["request_id"]]
                await again.send(
                    {
                        "type": "input",
                        "runtime": runtime,
                        "payload": {
                            "kind": "approval_response",
                            "request_id": asked["request_id"],
                            "error": "client cannot decide",
                        },
                    }
                )
                assert (await again.of_type("turn_finished"))["stop_reason"] == "end_turn"

    with FakeProvider([{"tool_calls": [bash("touch later.txt")]}, {"text": "ok"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert "client cannot decide" in json.dumps(fake.requests[1]["body"])
    assert not (project / "later.txt").exists()


def test_signed_bearer_token_at_the_upgrade(project: Path) -> None:
    import jwt

    secret = b"k" * 32
    policy = auth.AuthPolicy("signed-bearer-token", secret=secret, audience="tether")

    async def scenario() -> None:
        async with InProcess(project, policy=policy) as srv:
            good = jwt.encode(
                {"exp": time.time() + 60, "aud": ["x", "tether"]}, secret, algorithm="HS256"
            )
            async with srv.connect(additional_headers={"Authorization": f"Bearer {good}"}):
                pass
            expired = jwt.encode(
                {"exp": time.time() - 120, "aud": "tether"}, secret, algorithm="HS256"
            )
            wrong_aud = jwt.encode(
                {"exp": time.time() + 60, "aud": "other"}, secret, algorithm="HS256"
            )
            for token, message in ((expired, auth.EXPIRED_JWT), (wrong_aud, auth.INVALID_JWT)):
                with pytest.raises(InvalidStatus) as err:
                    async with srv.connect(additional_headers={"Authorization": f"Bearer {token}"}):
                        pass
                assert err.value.response.status_code == 401
                assert err.value.response.body.decode().strip() == message
            status, _ = await raw_http(
                srv.port, "GET /ws HTTP/1.1", {**UPGRADE, "Authorization": "Bearer t\u00e9"}
            )
            assert status == 401  # a non-ASCII header

    run(scenario())


def test_sigint_mid_tool_finishes_the_turn_kills_the_group_and_exits_0(
    project: Path, tmp_path: Path
) -> None:
    from websockets.asyncio.client import connect

    script = [{"tool_calls": [bash("sleep 60 & echo $! > child.pid; wait")]}, {"text": "never"}]
    with FakeProvider(script) as fake:
        proc = ServerProcess(server_env(fake.url, tmp_path / "th", tmp_path), project)
        try:

            async def scenario() -> list[Any]:
                async with connect(proc.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(project, mode="bypassPermissions"))["runtime"]
                    await c.say(runtime, "go")
                    deadline = time.monotonic() + 20
                    while not (project / "child.pid").exists() and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    proc.proc.send_signal(signal.SIGINT)
                    finished = await c.of_type("turn_finished")
                    with pytest.raises(ConnectionClosed):
                        await c.wait_for(lambda f: False, timeout=10)
                    return [finished["stop_reason"]]

            assert run(scenario()) == ["cancelled"]
        finally:
            code = proc.stop()
    assert code == 0
    time.sleep(0.2)
    assert not _alive(int((project / "child.pid").read_text()))


def test_input_queue_is_bounded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with InProcess(project, max_queue=1) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "one", request_id="q1")
            await c.wait_for(
                lambda f: (
                    f["type"] == "update_loop_status"
                    and f["loop_status"]["status"] == "SENDING_API_REQUEST"
                )
            )
            await c.say(runtime, "two", request_id="q2")
            assert (await c.of_type("input_accepted", request_id="q2"))["disposition"] == "queued"
            await c.say(runtime, "three", request_id="q3")
            refused = await c.of_type("input_accepted", request_id="q3")
            assert refused["accepted"] is False and "queue" in refused["error"]
            await c.of_type("turn_finished", request_id="q2")

    with FakeProvider([{"text": "a", "delay_ms": 300}, {"text": "b"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())
        assert len(fake.requests) == 2


@pytest.mark.parametrize("when", ["request-in-flight", "request-starting"])
def test_an_early_abort_leaves_the_next_turn_working(
    project: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "slow one")
            if when == "request-in-flight":
                deadline = time.monotonic() + 20
                while not fake.requests and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
            else:
                await c.wait_for(lambda f: f.get("type") == "update_loop_status"
                                 and f["loop_status"]["status"] == "SENDING_API_REQUEST")
            await c.send({"type": "abort_message", "request_id": "ab", "runtime": runtime})
            assert (await c.of_type("turn_finished"))["stop_reason"] == "cancelled"
            await c.say(runtime, "again", request_id="in-2")
            done = await c.of_type("turn_finished", timeout=15, request_id="in-2")
            assert done["stop_reason"] == "end_turn"

    with FakeProvider([{"text": "too late", "delay_ms": 3000}, {"text": "second"}]) as fake:
        point_at(fake, monkeypatch)
        run(scenario())


def test_connections_per_address_are_capped(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project, max_connections_per_ip=2) as srv:
            async with srv.connect() as a, srv.connect() as b:
                with pytest.raises(InvalidStatus) as refused:
                    async with srv.connect():
                        pass
                assert refused.value.response.status_code == 429
                for ws in (a, b):  # the two admitted ones still work
                    await ws.send(json.dumps({"type": "app_server_info", "request_id": "i"}))
                    assert json.loads(await ws.recv())["request_id"] == "i"
            await asyncio.sleep(0.1)
            async with srv.connect() as c:  # closing frees the slots
                await c.send(json.dumps({"type": "app_server_info", "request_id": "j"}))
                assert json.loads(await c.recv())["request_id"] == "j"

    run(scenario())
