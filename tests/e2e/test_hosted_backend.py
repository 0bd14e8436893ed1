"""The hosted backend end to end: the real `tether` against the real Letta server (letta==0.16.8,
PostgreSQL and Redis from their PyPI wheels) whose model is tether's fake provider.

Every test checks the effects where they land: files on disk for tool calls, the server's own
history (GET /v1/conversations/{id}/messages) for what the conversation holds, and the model
requests the fake provider saw for what was (not) sent twice.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.api.hosted import MODEL, Hosted, hosted_server
from tests.e2e.support import TETHER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def letta() -> Iterator[Hosted]:
    yield from hosted_server()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def _result(run: Any) -> dict[str, Any]:
    results = run.of_type("result")
    assert results, f"no result line; stderr: {run.stderr[-2000:]}"
    return results[-1]


def _init(run: Any) -> dict[str, Any]:
    return run.of_type("system")[0]


def _kinds(history: list[dict[str, Any]]) -> list[str]:
    return [m["message_type"] for m in history if m["message_type"] != "system_message"]


def test_a_text_turn_lives_on_the_server(letta: Hosted, project: Path) -> None:
    letta.script([{"text": "Hello from the hosted model"}])
    run = letta.run(["-p", "say hello", "-m", MODEL, "--output-format", "stream-json"], project)
    assert run.code == 0, run.stderr
    result = _result(run)
    assert result["subtype"] == "success" and result["result"] == "Hello from the hosted model"
    init = _init(run)
    assert init["agent_id"].startswith("agent-") and init["conversation_id"].startswith("conv-")
    assert init["model"] == MODEL and "Bash" in init["tools"]
    history = letta.history(init["conversation_id"])
    assert _kinds(history) == ["user_message", "assistant_message"]
    assert history[-1]["content"] == "Hello from the hosted model"
    request = letta.model_requests()[-1]["body"]
    assert {t["function"]["name"] for t in request["tools"]} >= {"Bash", "Read", "memory_insert"}
    assert letta.violations() == []


def test_an_allowed_client_tool_runs_locally_and_its_result_reaches_the_server(
    letta: Hosted, project: Path
) -> None:
    letta.script([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch made-by-tool.txt",
                                                       "description": "make a file"},
                         "id": "call_allowed1"}]},
        {"text": "made it"},
    ])
    run = letta.run(["-p", "make the file", "-m", MODEL, "--output-format", "stream-json",
                     "--allowedTools", "Bash(touch made-by-tool.txt)"], project)
    assert run.code == 0, run.stderr
    assert (project / "made-by-tool.txt").exists()
    assert _result(run)["result"] == "made it"
    returns = run.of_type("message", "tool_return_message")
    assert [r["status"] for r in returns] == ["success"]
    history = letta.history(_init(run)["conversation_id"])
    assert _kinds(history) == ["user_message", "approval_request_message",
                               "approval_response_message", "tool_return_message",
                               "assistant_message"]
    ret = next(m for m in history if m["message_type"] == "tool_return_message")
    assert ret["tool_call_id"] == "call_allowed1" and ret["status"] == "success"


def test_a_tool_denied_by_a_rule_never_runs_and_the_server_gets_the_denial(
    letta: Hosted, project: Path
) -> None:
    letta.script([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch denied.txt",
                                                       "description": "make a file"},
                         "id": "call_denied1"}]},
        {"text": "could not"},
    ])
    run = letta.run(["-p", "make the file", "-m", MODEL, "--output-format", "stream-json",
                     "--disallowedTools", "Bash"], project)
    assert run.code == 0, run.stderr
    assert not (project / "denied.txt").exists()
    history = letta.history(_init(run)["conversation_id"])
    response = next(m for m in history if m["message_type"] == "approval_response_message")
    denial = response["approvals"][0]
    assert denial["tool_call_id"] == "call_denied1" and denial["approve"] is False
    assert "Bash" in denial["reason"]
    ret = next(m for m in history if m["message_type"] == "tool_return_message")
    assert ret["status"] == "error" and "denied" in ret["tool_return"]


def test_a_conversation_resumes_in_a_new_process(letta: Hosted, project: Path) -> None:
    letta.script([{"text": "first answer"}, {"text": "second answer"}])
    first = letta.run(["-p", "remember the word kumquat", "-m", MODEL,
                       "--output-format", "stream-json"], project)
    assert first.code == 0, first.stderr
    conversation = _init(first)["conversation_id"]
    second = letta.run(["-p", "which word?", "--conversation", conversation,
                        "--output-format", "json"], project)
    assert second.code == 0, second.stderr
    assert json.loads(second.stdout)["result"] == "second answer"
    sent = json.dumps(letta.model_requests()[-1]["body"]["messages"])
    assert "remember the word kumquat" in sent and "first answer" in sent
    kinds = _kinds(letta.history(conversation))
    assert kinds == ["user_message", "assistant_message"] * 2


def test_the_default_conversation_of_an_agent(letta: Hosted, project: Path) -> None:
    letta.script([{"text": "made"}, {"text": "in default"}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    agent = _init(made)["agent_id"]
    run = letta.run(["-p", "hello default", "--agent", agent, "--conversation", "default",
                     "--output-format", "stream-json"], project)
    assert run.code == 0, run.stderr
    assert _init(run)["conversation_id"] == "default" and _result(run)["result"] == "in default"
    history = letta.api("GET", f"/v1/conversations/default/messages?agent_id={agent}&order=asc")
    assert any(m.get("content") == "hello default" for m in history)


def test_another_active_run_is_the_busy_error(letta: Hosted, project: Path) -> None:
    letta.script([{"text": "made"}, {"text": "slow answer", "delay_ms": 6000}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    conversation = _init(made)["conversation_id"]
    # Another client of the server (not a tether here: that would meet tether's local turn
    # lock first) has a run going on the conversation.
    other = threading.Thread(target=letta.stream, args=(conversation, "slow"), daemon=True)
    other.start()
    try:
        _wait_for_run(letta, conversation)
        busy = letta.run(["-p", "me too", "--conversation", conversation], project)
    finally:
        other.join(timeout=60)
    assert busy.code == 1
    assert "is busy with another active run on the Letta server" in busy.stderr
    assert letta.url in busy.stderr
    users = [m["content"] for m in letta.history(conversation) if m["message_type"] == "user_message"]
    assert users == ["hi", "slow"]  # the refused message was never added


def _wait_for_run(letta: Hosted, conversation: str, timeout_s: float = 30) -> str:
    """The id of the conversation's active run, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        active = letta.api("GET", f"/v1/runs/?conversation_id={conversation}&active=true")
        for run in active or []:
            if run.get("status") in ("created", "running"):
                return str(run["id"])
        time.sleep(0.2)
    raise AssertionError("no run became active")


class CuttingProxy:
    """A loopback TCP proxy to the Letta server that closes the first streamed answer of
    `POST .../messages` after `cut_after` bytes of its body, once."""

    def __init__(self, target_port: int, cut_after: int) -> None:
        self.target_port = target_port
        self.cut_after = cut_after
        self.cuts = 0
        self.requests: list[bytes] = []  # each connection's request line
        self.uploads: list[bytearray] = []  # everything each connection sent upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.server = threading.Thread(target=self._serve, daemon=True)
        self.server.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        request = b""
        cut = False
        upload = bytearray()
        self.uploads.append(upload)

        def up() -> None:
            nonlocal request, cut
            try:
                while data := client.recv(65536):
                    if not request:
                        request = data
                        self.requests.append(data.split(b"\r\n")[0])
                        cut = (self.cuts == 0 and data.startswith(b"POST ")
                               and b"/messages " in data.split(b"\r\n")[0])
                        if cut:
                            self.cuts += 1
                    upload.extend(data)
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=up, daemon=True).start()
        sent = 0
        try:
            while data := upstream.recv(65536):
                if cut and b"data: " in data and sent + len(data) > self.cut_after:
                    client.sendall(data[: max(0, self.cut_after - sent)])
                    break  # close mid-stream: the client sees a broken answer
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:  # shutdown first: a recv blocked in the other thread keeps a closed fd open
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self.stop.set()
        self.server.join(timeout=5)
        self.listener.close()


@pytest.mark.parametrize("cut_after", [900, 0], ids=["mid-run", "before-any-event"])
def test_a_cut_stream_reattaches_without_sending_the_message_again(
    letta: Hosted, project: Path, cut_after: int
) -> None:
    """Cut mid-run, tether re-attaches after the last event it saw (`run_id`, `starting_after`);
    cut before any event named the run, it finds the run by its input's `otid`."""
    letta.script([{"text": "made"},
                  {"text": "a long answer that arrives in many small pieces", "chunk_size": 3,
                   "delay_ms": 500}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    conversation = _init(made)["conversation_id"]
    port = int(letta.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, cut_after=cut_after)
    before = len(letta.model_requests())
    try:
        env = letta.env(LETTA_BASE_URL=f"http://127.0.0.1:{proxy.port}")
        run = letta.run(["-p", "tell me", "--conversation", conversation, "--output-format",
                         "stream-json"], project, env=env)
    finally:
        proxy.close()
    assert proxy.cuts == 1
    lines = [r.decode() for r in proxy.requests]
    assert sum("/messages " in r for r in lines if r.startswith("POST")) == 1, lines
    assert any(r.startswith(f"POST /v1/conversations/{conversation}/stream ") for r in lines), lines
    reattach = next(u for u in proxy.uploads if b"/stream " in u.split(b"\r\n")[0])
    assert (b'"otid"' in reattach) is (cut_after == 0) and (b'"run_id"' in reattach) is (cut_after > 0)
    assert run.code == 0, run.stderr
    assert _result(run)["result"] == "a long answer that arrives in many small pieces"
    assert len(letta.model_requests()) == before + 1  # one model call: nothing sent twice
    users = [m["content"] for m in letta.history(conversation) if m["message_type"] == "user_message"]
    assert users == ["hi", "tell me"]


def test_a_pending_approval_left_on_the_server_is_denied_and_the_turn_goes_on(
    letta: Hosted, project: Path
) -> None:
    letta.script([{"text": "made"}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    conversation = _init(made)["conversation_id"]
    # Another client leaves a client-tool call waiting for approval on the server.
    letta.script([{"tool_calls": [{"name": "Bash", "arguments": {"command": "touch stale.txt"},
                                   "id": "call_stale1"}]},
                  {"text": "carried on"}])
    letta.stream(conversation, "leave it pending", client_tools=[{
        "name": "Bash", "description": "shell",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}])
    run = letta.run(["-p", "next", "--conversation", conversation, "--output-format",
                     "stream-json"], project)
    assert run.code == 0, run.stderr
    assert _result(run)["result"] == "carried on"
    assert not (project / "stale.txt").exists()
    history = letta.history(conversation)
    response = next(m for m in history if m["message_type"] == "approval_response_message")
    assert response["approvals"][0]["tool_call_id"] == "call_stale1"
    assert response["approvals"][0]["approve"] is False
    assert "stale pending tool call closed by the harness" in response["approvals"][0]["reason"]
    assert [m["content"] for m in history if m["message_type"] == "user_message"][-1] == "next"


def test_headless_cloud_without_a_key_is_the_reference_error(project: Path, tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("LETTA_")}
    run = subprocess.run([TETHER, "--backend", "cloud", "-p", "hi"], env=env, cwd=project,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "Missing LETTA_API_KEY" in run.stderr
    assert "Headless mode requires an API key set via the LETTA_API_KEY environment variable" in run.stderr


def test_the_saved_default_backend(letta: Hosted, project: Path, tether_home: Path) -> None:
    from tests.e2e.support import run_tether

    shown = run_tether(["backend"], env=letta.env(), cwd=project)
    assert shown.code == 0 and "local" in shown.stdout
    saved = run_tether(["backend", "cloud"], env=letta.env(), cwd=project)
    assert saved.code == 0, saved.stderr
    assert json.loads((tether_home / "state" / "backend.json").read_text()) == {
        "preferredBackendMode": "api"}
    bad = run_tether(["backend", "moon"], env=letta.env(), cwd=project)
    assert bad.code == 1 and "'moon' is not valid" in bad.stderr
    letta.script([{"text": "via the saved default"}])
    run = run_tether(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"],
                     env=letta.env(), cwd=project)
    assert run.code == 0, run.stderr
    assert _init(run)["conversation_id"].startswith("conv-")  # a server conversation
    local = run_tether(["--backend", "local", "-p", "hi"], env=letta.env(), cwd=project)
    assert "No model configured" in local.stderr  # the one-off override reached the local path


SDK = ROOT / ".cache" / "letta-sdk" / "node_modules" / "@letta-ai" / "letta-code-sdk" / "dist" / "index.js"
SHIM = """\
import { spawn } from "node:child_process";
const child = spawn(process.env.TETHER_BIN, process.argv.slice(2), { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => child.kill(sig));
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
"""
DRIVER = """\
import { createSession } from "SDK_URL";
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\\n");
const asked = [];
const session = createSession(undefined, {
  model: "MODEL",
  cwd: process.env.WORKDIR,
  canUseTool: async (toolName, toolInput) => {
    asked.push({ toolName, toolInput });
    return { behavior: "allow" };
  },
});
for (const prompt of ["say hello", "write the file"]) {
  await session.send(prompt);
  for await (const msg of session.stream()) out({ prompt, ...msg });
}
out({ type: "asked", asked, agentId: session.agentId, conversationId: session.conversationId });
session.close();
"""


def test_the_letta_code_sdk_drives_tether_on_the_cloud_backend(
    letta: Hosted, project: Path, tmp_path: Path, tether_home: Path
) -> None:
    if not (SDK.exists() and shutil.which("node")):
        pytest.fail("the Letta Code SDK is required: ./scripts/install-letta-sdk (needs npm)")
    from tests.e2e.support import run_tether

    assert run_tether(["backend", "cloud"], env=letta.env(), cwd=project).code == 0
    shim, driver = tmp_path / "letta-shim.mjs", tmp_path / "driver.mjs"
    shim.write_text(SHIM)
    driver.write_text(DRIVER.replace("SDK_URL", SDK.as_uri()).replace("MODEL", MODEL))
    letta.script([
        {"text": "Hello through the server"},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo sdk > sdk.txt",
                                                       "description": "write"}, "id": "call_sdk1"}]},
        {"text": "wrote it"},
    ])
    env = letta.env(LETTA_CLI_PATH=str(shim), TETHER_BIN=TETHER, WORKDIR=str(project))
    proc = subprocess.run(["node", str(driver)], capture_output=True, text=True, env=env,
                          cwd=project, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [m for m in lines if m.get("type") == "result"]
    assert [r.get("success", r.get("subtype") == "success") for r in results] == [True, True], results
    assert "Hello through the server" in "".join(
        str(m.get("content")) for m in lines if m.get("type") == "assistant")
    summary = lines[-1]
    assert summary["asked"][0]["toolName"] == "Bash"  # tether asked the SDK, then ran it here
    assert (project / "sdk.txt").read_text() == "sdk\n"
    # It was tether on the server, not the SDK's bundled CLI: the agent and its history are there.
    assert summary["agentId"].startswith("agent-") and summary["conversationId"].startswith("conv-")
    history = letta.history(summary["conversationId"])
    assert [m["content"] for m in history if m["message_type"] == "user_message"] == [
        "say hello", "write the file"]
    ret = next(m for m in history if m["message_type"] == "tool_return_message")
    assert ret["tool_call_id"] == "call_sdk1" and ret["status"] == "success"


def test_an_interrupt_cancels_the_run_on_the_server(letta: Hosted, project: Path) -> None:
    import signal

    letta.script([{"text": "made"}, {"text": "too late", "delay_ms": 8000}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    conversation = _init(made)["conversation_id"]
    proc = subprocess.Popen([TETHER, "--backend", "cloud", "-p", "slow", "--conversation",
                             conversation, "--output-format", "stream-json"], env=letta.env(),
                            cwd=project, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        run_id = _wait_for_run(letta, conversation)
        time.sleep(0.5)  # the stream is open
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    deadline = time.monotonic() + 20
    while letta.api("GET", f"/v1/runs/{run_id}")["status"] not in ("cancelled", "completed", "failed"):
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.2)
    assert letta.api("GET", f"/v1/runs/{run_id}")["status"] == "cancelled"
    assert "too late" not in out


def test_answers_an_interrupt_left_go_to_the_server_with_the_next_message(
    letta: Hosted, project: Path, tether_home: Path
) -> None:
    import signal

    letta.script([{"text": "made"},
                  {"tool_calls": [{"name": "Bash", "arguments": {
                      "command": "python3 -c 'import time; time.sleep(30)'; touch finished.txt",
                      "description": "wait"},
                      "id": "call_intr1"}]},
                  {"text": "picked up again"}])
    made = letta.run(["-p", "hi", "-m", MODEL, "--output-format", "stream-json"], project)
    conversation = _init(made)["conversation_id"]
    proc = subprocess.Popen([TETHER, "--backend", "cloud", "-p", "wait a bit", "--conversation",
                             conversation, "--yolo", "--output-format", "stream-json"],
                            env=letta.env(), cwd=project, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the tool is running once its call is shown
            if json.loads(line).get("message_type") == "tool_call_message":
                break
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert not (project / "finished.txt").exists()
    stash = list((tether_home / "state" / "server-answers").glob("*.json"))
    assert len(stash) == 1 and "call_intr1" in stash[0].read_text()
    run = letta.run(["-p", "go on", "--conversation", conversation, "--output-format",
                     "stream-json"], project)
    assert run.code == 0, run.stderr
    assert _result(run)["result"] == "picked up again"
    assert not list((tether_home / "state" / "server-answers").glob("*.json"))
    history = letta.history(conversation)
    response = next(m for m in history if m["message_type"] == "approval_response_message")
    answer = response["approvals"][0]
    assert answer["tool_call_id"] == "call_intr1"
    assert "stale pending tool call" not in json.dumps(answer)  # tether's own answer, not a guess
    assert [m["content"] for m in history if m["message_type"] == "user_message"][-1] == "go on"


def test_tether_connect_letta_stores_the_server_for_later_runs(
    letta: Hosted, project: Path, tether_home: Path
) -> None:
    from tests.e2e.support import run_tether

    env = {k: v for k, v in letta.env().items() if not k.startswith("LETTA_")}
    saved = run_tether(["connect", "letta", "--base-url", letta.url, "--api-key", "sk-let-stored"],
                       env=env, cwd=project)
    assert saved.code == 0, saved.stderr
    auth = json.loads((tether_home / "providers" / "auth.json").read_text())
    assert [(r["name"], r["base_url"], r["auth"]["key"]) for r in auth] == [
        ("lc-letta", letta.url, "sk-let-stored")]
    assert oct((tether_home / "providers" / "auth.json").stat().st_mode & 0o777) == "0o600"
    letta.script([{"text": "reached through the stored server"}])
    run = run_tether(["--backend", "cloud", "-p", "hi", "-m", MODEL], env=env, cwd=project)
    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "reached through the stored server"
    wrong = run_tether(["connect", "letta", "--region", "x"], env=env, cwd=project)
    assert wrong.code == 1 and "only --api-key and --base-url" in wrong.stderr


def test_bad_targets_are_named(letta: Hosted, project: Path) -> None:
    from tests.e2e.support import run_tether

    gone = letta.run(["-p", "hi"], project, env=letta.env(LETTA_BASE_URL="http://127.0.0.1:9"))
    assert gone.code == 1 and "cannot reach the Letta server at http://127.0.0.1:9" in gone.stderr
    agent = "agent-00000000-0000-4000-8000-000000000000"
    missing = letta.run(["-p", "hi", "--agent", agent], project)
    assert missing.code == 1
    assert f"agent {agent} not found on the Letta server at {letta.url}" in missing.stderr
    bad = run_tether(["--backend", "moon", "-p", "hi"], env=letta.env(), cwd=project)
    assert bad.code == 1 and "--backend 'moon' is not valid" in bad.stderr


def test_the_terminal_ui_runs_a_turn_on_the_server(
    letta: Hosted, project: Path, tmp_path: Path
) -> None:
    from tests.requirements import need_tmux

    tmux_bin = need_tmux()
    letta.script([{"text": "answered by the hosted agent", "chunk_size": 4}])
    env = letta.env(TERM="xterm-256color")
    env.pop("TMUX", None)
    base = [tmux_bin, "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
    status = tmp_path / "exit-status"

    def tmux(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=10)

    def wait_for(text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = tmux("capture-pane", "-p", "-t", "tui").stdout
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared:\n{tmux('capture-pane', '-p', '-t', 'tui').stdout}")

    command = f"{TETHER} --backend cloud --model {MODEL}; echo $? > {status}"
    try:
        started = tmux("new-session", "-d", "-s", "tui", "-x", "140", "-y", "40", "-c", str(project),
                       command)
        assert started.returncode == 0, started.stderr
        header = wait_for("○ ready")
        conversation = next(w for w in header.split() if w.startswith("conv-"))
        tmux("send-keys", "-t", "tui", "hello hosted", "Enter")
        wait_for("answered by the hosted agent")
        wait_for("○ ready")
        for _ in range(2):
            tmux("send-keys", "-t", "tui", "C-c")
            time.sleep(0.5)
        deadline = time.monotonic() + 20
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        tmux("kill-server")
    assert status.read_text().strip() == "0"
    history = letta.history(conversation)
    assert [(m["message_type"], m["content"]) for m in history if m["message_type"] != "system_message"] == [
        ("user_message", "hello hosted"), ("assistant_message", "answered by the hosted agent")]
