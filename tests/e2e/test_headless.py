"""End to end: the real `tether` script, headless, against the fake provider in every dialect."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.support import DIALECTS, TETHER, run_tether, tether_env, transcript_lines
from tether.testing.fake_provider import FakeProvider

MODELS = list(DIALECTS)




def bash_call(command: str) -> dict:
    return {"name": "Bash", "arguments": {"command": command, "description": "test command"}}


@pytest.mark.parametrize("model", MODELS)
def test_text_reply_stream_json(model: str, workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "Hello from the fake model", "usage": {"input": 11, "output": 5}}]) as fake:
        run = run_tether(
            ["-p", "say hello", "--model", model, "--toolset", "default", "--output-format", "stream-json"],
            env=tether_env(fake.url, model), cwd=workdir,
        )
        assert fake.violations == []
    assert run.code == 0, run.stderr
    events = run.events
    init = events[0]
    assert (init["type"], init["subtype"]) == ("system", "init")
    assert "Bash" in init["tools"] and isinstance(init["tools"], list)
    assert init["agent_id"].startswith("agent-local-") and init["model"] == model
    texts = run.of_type("message", "assistant_message")
    assert "".join(t["content"] for t in texts) == "Hello from the fake model"
    assert all(e["session_id"] == init["agent_id"] and "uuid" in e and "timestamp" in e for e in events)
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"] == "Hello from the fake model"
    assert result["num_turns"] == 1 and result["conversation_id"] == init["conversation_id"]
    assert result["usage"]["prompt_tokens"] >= 11 and result["usage"]["completion_tokens"] == 5
    assert result["run_ids"] and all(r.startswith("local-run-") for r in result["run_ids"])
    lines = transcript_lines(tether_home)
    assert lines[0]["type"] == "session" and lines[0]["version"] == 3
    roles = [entry["message"]["role"] for entry in lines[1:]]
    assert roles == ["user", "assistant"]


@pytest.mark.parametrize("model", MODELS)
def test_bash_tool_call_then_answer(model: str, workdir: Path, tether_home: Path) -> None:
    script = [
        {"tool_calls": [bash_call("echo made-by-tool > out.txt")], "chunk_size": 2},
        {"text": "I wrote out.txt"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "write a file", "--model", model, "--toolset", "default", "--output-format", "stream-json",
             "--yolo"],
            env=tether_env(fake.url, model), cwd=workdir,
        )
        assert fake.violations == []
        assert len(fake.requests) == 2
        second_request = json.dumps(fake.requests[1]["body"])
    assert run.code == 0, run.stderr
    assert (workdir / "out.txt").read_text() == "made-by-tool\n"
    calls = run.of_type("message", "tool_call_message")
    returns = run.of_type("message", "tool_return_message")
    assert len(calls) == 1 and calls[0]["tool_call"]["name"] == "Bash"
    assert json.loads(calls[0]["tool_call"]["arguments"])["command"] == "echo made-by-tool > out.txt"
    call_id = calls[0]["tool_call"]["tool_call_id"]
    assert calls[0]["uuid"] == f"tool-call-{call_id}"
    assert returns[0]["tool_call_id"] == call_id and returns[0]["status"] == "success"
    assert call_id in second_request  # the result went back to the model, answering the call
    assert run.events[-1]["result"] == "I wrote out.txt" and run.events[-1]["num_turns"] == 2
    entries = [e["message"] for e in transcript_lines(tether_home)[1:]]
    assert [m["role"] for m in entries] == ["user", "assistant", "toolResult", "assistant"]
    assert entries[1]["content"][-1]["type"] == "toolCall" and entries[2]["toolCallId"] == call_id


def test_standard_mode_denies_shell_with_hint(workdir: Path) -> None:
    model = "anthropic/claude-test"
    script = [{"tool_calls": [bash_call("touch should-not-exist")]}, {"text": "ok, I could not"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "try", "--model", model, "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
        denied_result = json.dumps(fake.requests[1]["body"])
    assert run.code == 0, run.stderr
    assert not (workdir / "should-not-exist").exists()
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error"
    assert ret["tool_return"].startswith("Error: request to call tool denied. User reason: Tool requires approval (headless mode)")
    assert "--yolo" in ret["tool_return"]
    assert "Tool requires approval (headless mode)" in denied_result


def test_standard_mode_runs_read_only_tools_inside_cwd(workdir: Path, tmp_path: Path) -> None:
    model = "openai/gpt-test"
    (workdir / "notes.txt").write_text("inside\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    script = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": "notes.txt"}},
                        {"name": "Read", "arguments": {"file_path": str(outside)}}]},
        {"text": "read"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "read", "--model", model, "--toolset", "default", "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 0, run.stderr
    calls = [c["tool_call"]["tool_call_id"] for c in run.of_type("message", "tool_call_message")]
    returns = {r["tool_call_id"]: r for r in run.of_type("message", "tool_return_message")}
    inside_ret, outside_ret = returns[calls[0]], returns[calls[1]]
    assert inside_ret["status"] == "success" and "inside" in inside_ret["tool_return"]
    assert outside_ret["status"] == "error" and "secret" not in outside_ret["tool_return"]


@pytest.mark.parametrize("model", MODELS)
def test_429_then_success_shows_retry(model: str, workdir: Path) -> None:
    script = [{"fault": {"status": 429, "retry_after": 0}}, {"text": "after retry"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "hi", "--model", model, "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 0, run.stderr
    retries = run.of_type("retry")
    assert len(retries) == 1 and retries[0]["attempt"] == 1 and retries[0]["max_attempts"] == 3
    assert retries[0]["reason"] == "llm_api_error" and "delay_ms" in retries[0]
    assert run.events[-1]["result"] == "after retry"


@pytest.mark.parametrize("model", MODELS)
def test_cut_stream_is_an_error(model: str, workdir: Path, tether_home: Path) -> None:
    script = [{"text": "this answer will be cut off midway", "chunk_size": 1, "fault": {"cut_after_events": 8}}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "hi", "--model", model, "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 1
    errors = run.of_type("error")
    assert errors and errors[-1]["stop_reason"] == "llm_api_error"
    assert not run.of_type("result")
    roles = [e["message"]["role"] for e in transcript_lines(tether_home)[1:]]
    assert roles == ["user"]  # the cut answer is not recorded as if it had finished


@pytest.mark.parametrize("model", MODELS)
def test_resume_conversation_sees_earlier_turns(model: str, workdir: Path) -> None:
    with FakeProvider([{"text": "first answer"}, {"text": "second answer"}]) as fake:
        env = tether_env(fake.url, model)
        first = run_tether(["-p", "first prompt", "--model", model, "--output-format", "json"], env=env, cwd=workdir)
        assert first.code == 0, first.stderr
        doc = json.loads(first.stdout)
        assert doc["type"] == "result" and doc["is_error"] is False and doc["result"] == "first answer"
        conv = doc["conversation_id"]
        second = run_tether(["-p", "second prompt", "--conversation", conv, "--output-format", "json"],
                            env=env, cwd=workdir)
        assert second.code == 0, second.stderr
        assert json.loads(second.stdout)["conversation_id"] == conv
        history = json.dumps(fake.requests[1]["body"])
    assert "first prompt" in history and "first answer" in history and "second prompt" in history


def test_text_output_and_fresh_conversation_each_run(workdir: Path) -> None:
    model = "openai-chat/gpt-test"
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        env = tether_env(fake.url, model)
        a = run_tether(["-p", "x", "--model", model], env=env, cwd=workdir)
        b = run_tether(["-p", "y"], env=env, cwd=workdir)  # model comes from the agent record
        second_body = fake.requests[1]["body"]
    assert (a.code, a.stdout, b.code, b.stdout) == (0, "one\n", 0, "two\n")
    assert "x" not in [m.get("content") for m in second_body["messages"]]  # a fresh conversation


def test_prompt_from_stdin(workdir: Path) -> None:
    model = "anthropic/claude-test"
    with FakeProvider([{"text": "got it"}]) as fake:
        run = run_tether(["--model", model], env=tether_env(fake.url, model), cwd=workdir, stdin="from stdin\n")
        body = json.dumps(fake.requests[0]["body"])
    assert run.code == 0 and run.stdout == "got it\n"
    assert "from stdin" in body


def test_max_turns_never_strands_a_tool_call(workdir: Path, tether_home: Path) -> None:
    model = "anthropic/claude-test"
    script = [{"tool_calls": [bash_call("echo one")]}, {"tool_calls": [bash_call("echo two")]}, {"text": "x"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "loop", "--model", model, "--yolo", "--max-turns", "1",
                          "--output-format", "stream-json"], env=tether_env(fake.url, model), cwd=workdir)
        assert len(fake.requests) == 1
    assert run.code == 1
    assert run.of_type("error")[-1]["message"] == "Maximum turns limit reached (1/1 steps)"
    assert run.of_type("error")[-1]["stop_reason"] == "max_steps"
    messages = [e["message"] for e in transcript_lines(tether_home)[1:]]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult"]


def test_bad_flags_are_clear_errors(workdir: Path, tether_home: Path) -> None:
    env = dict(os.environ)
    for args, needle in [
        (["-p", "x", "--max-turns", "0"], "--max-turns expects a positive integer"),
        (["-p", "x", "--output-format", "xml"], "--output-format 'xml' is not valid"),
        (["-p", "x", "--permission-mode", "sometimes"], "Invalid permission mode 'sometimes'"),
        (["-p", "x", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["-p", "x", "--new", "--conversation", "local-conv-1"], "--new cannot be combined"),
        (["-p", "x", "--model", "nope/model"], "valid providers: anthropic/"),
    ]:
        run = run_tether(args, env=env, cwd=workdir)
        assert run.code == 1, args
        assert needle.lower() in run.stderr.lower(), (args, run.stderr)
    assert not (tether_home / "agents").exists()  # bad input created nothing


def test_no_model_configured_names_the_ways_to_configure(workdir: Path) -> None:
    run = run_tether(["-p", "hi"], env=dict(os.environ), cwd=workdir)
    assert run.code == 1
    assert "ANTHROPIC_API_KEY" in run.stderr and "tether connect" in run.stderr


def test_sigint_kills_the_tool_process_group(workdir: Path, tether_home: Path) -> None:
    model = "anthropic/claude-test"
    command = "sleep 60 & echo $! > child.pid; wait"
    with FakeProvider([{"tool_calls": [bash_call(command)]}, {"text": "never"}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "-p", "run it", "--model", model, "--yolo", "--output-format", "stream-json"],
            env=tether_env(fake.url, model), cwd=workdir, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        pid_file = workdir / "child.pid"
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        assert len(fake.requests) == 1
    assert proc.returncode == 130, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "error" and events[-1]["message"] == "Interrupted by SIGINT"
    assert events[-1]["stop_reason"] == "cancelled"
    time.sleep(0.2)
    assert not _alive(child), "the tool's background child survived the interrupt"
    messages = [e["message"] for e in transcript_lines(tether_home)[1:]]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult"]
    assert messages[-1]["isError"] is True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting its reaper is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_second_process_on_a_busy_conversation_is_refused(workdir: Path) -> None:
    model = "anthropic/claude-test"
    with FakeProvider([{"text": "created"}, {"text": "slow", "delay_ms": 3000}]) as fake:
        env = tether_env(fake.url, model)
        first = run_tether(["-p", "a", "--model", model, "--output-format", "json"], env=env, cwd=workdir)
        conv = json.loads(first.stdout)["conversation_id"]
        slow = subprocess.Popen([TETHER, "-p", "b", "--conversation", conv], env=env, cwd=workdir,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        busy = run_tether(["-p", "c", "--conversation", conv], env=env, cwd=workdir)
        out, _ = slow.communicate(timeout=30)
    assert busy.code == 1 and "busy" in busy.stderr
    assert slow.returncode == 0 and out == "slow\n"


def test_subcommands_version_agents_messages(workdir: Path) -> None:
    model = "anthropic/claude-test"
    version = run_tether(["--version"], env=dict(os.environ), cwd=workdir)
    assert version.code == 0 and version.stdout.endswith("(tether)\n")
    with FakeProvider([{"text": "hi there"}]) as fake:
        env = tether_env(fake.url, model)
        doc = json.loads(run_tether(["-p", "hello", "--model", model, "--output-format", "json"],
                                    env=env, cwd=workdir).stdout)
    agents = json.loads(run_tether(["agents", "list"], env=env, cwd=workdir).stdout)
    assert [a["id"] for a in agents] == [doc["agent_id"]]
    msgs = run_tether(["messages", "list", "--conversation", doc["conversation_id"]], env=env, cwd=workdir)
    assert msgs.code == 0, msgs.stderr
    assert [m["role"] for m in json.loads(msgs.stdout)] == ["user", "assistant"]
    missing = run_tether(["messages", "list", "--conversation", "local-conv-999"], env=env, cwd=workdir)
    assert missing.code == 1 and "local-conv-999" in missing.stderr


def test_connect_stores_private_credentials_used_by_runs(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "via stored credentials"}]) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
        saved = run_tether(["connect", "anthropic", "--api-key", "sk-stored", "--base-url", fake.url],
                           env=env, cwd=workdir)
        assert saved.code == 0, saved.stderr
        auth = tether_home / "providers" / "auth.json"
        assert stat.S_IMODE(auth.stat().st_mode) == 0o600
        run = run_tether(["-p", "hi", "--model", "anthropic/claude-test"], env=env, cwd=workdir)
        assert fake.requests[0]["headers"].get("x-api-key") == "sk-stored"
    assert run.code == 0 and run.stdout == "via stored credentials\n"


def test_kill_9_mid_tool_then_resume_reports_an_unknown_outcome(workdir: Path, tether_home: Path) -> None:
    model = "openai-chat/gpt-test"
    script = [
        {"text": "created"},
        {"tool_calls": [bash_call("echo started >> started.txt; sleep 60 & echo $! > sleep.pid; wait")]},
        {"text": "resumed cleanly"},
    ]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, model)
        first = run_tether(["-p", "a", "--model", model, "--toolset", "default", "--output-format", "json"],
                           env=env, cwd=workdir)
        conv = json.loads(first.stdout)["conversation_id"]
        victim = subprocess.Popen([TETHER, "-p", "b", "--conversation", conv, "--yolo", "--toolset", "default"], env=env, cwd=workdir,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        deadline = time.monotonic() + 20
        while not ((workdir / "sleep.pid").exists() and (workdir / "sleep.pid").read_text().strip()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        # The command only runs once its group is in the ledger (tests/tools/test_spawn_race.py).
        ledgers = [*tether_home.glob("shell-groups/*.jsonl"), *tether_home.glob("tmp/*/shell-groups.jsonl")]
        assert any(p.read_text().strip() for p in ledgers)
        os.killpg(victim.pid, signal.SIGKILL)  # tether dies without any cleanup
        victim.wait(timeout=10)
        orphan = int((workdir / "sleep.pid").read_text())
        assert _alive(orphan)  # its shell runs in a session of its own: it outlived tether
        resumed = run_tether(["-p", "c", "--conversation", conv], env=env, cwd=workdir)
        assert fake.violations == []
        third = json.dumps(fake.requests[2]["body"])
    assert resumed.code == 0 and resumed.stdout == "resumed cleanly\n", resumed.stderr
    # The effect checkpoint says the command started: its outcome is unknown, and it is not re-run.
    assert "Tool execution may have completed, but the runtime stopped before recording its result" in third
    assert (workdir / "started.txt").read_text() == "started\n"
    deadline = time.monotonic() + 5
    while _alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(orphan)  # the next run reaped the group the killed one left behind
    assert (tether_home / "checkpoints.db").exists()
    roles = [e["message"]["role"] for e in transcript_lines(tether_home)[1:] if e["type"] == "message"]
    assert roles == ["user", "assistant", "user", "assistant", "toolResult", "user", "assistant"]


def test_include_partial_messages_streams_deltas(workdir: Path) -> None:
    model = "openai/gpt-test"
    with FakeProvider([{"text": "streamed in pieces", "chunk_size": 3, "thinking": "hmm"}]) as fake:
        run = run_tether(["-p", "x", "--model", model, "--output-format", "stream-json",
                          "--include-partial-messages"], env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 0, run.stderr
    deltas = [e["event"] for e in run.of_type("stream_event")]
    texts = [d["content"] for d in deltas if d["message_type"] == "assistant_message"]
    assert len(texts) > 1 and "".join(texts) == "streamed in pieces"
    assert len({d["otid"] for d in deltas if d["message_type"] == "assistant_message"}) == 1
    assert any(d["message_type"] == "reasoning_message" for d in deltas)
    assert not run.of_type("message", "assistant_message")


def test_accept_edits_allows_writes_inside_cwd_but_not_shell(workdir: Path, tmp_path: Path) -> None:
    model = "anthropic/claude-test"
    outside = tmp_path / "outside.txt"
    script = [
        {"tool_calls": [
            {"name": "Write", "arguments": {"file_path": "inside.txt", "content": "hello\n"}},
            {"name": "Write", "arguments": {"file_path": str(outside), "content": "no\n"}},
            bash_call("touch shell-was-here"),
        ]},
        {"text": "done"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "w", "--model", model, "--permission-mode", "acceptEdits",
                          "--output-format", "stream-json"], env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 0, run.stderr
    assert (workdir / "inside.txt").read_text() == "hello\n"
    assert not outside.exists() and not (workdir / "shell-was-here").exists()
    statuses = sorted(r["status"] for r in run.of_type("message", "tool_return_message"))
    assert statuses == ["error", "error", "success"]


def test_background_bash_task_output_and_nothing_outlives_the_run(workdir: Path) -> None:
    model = "anthropic/claude-test"
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo $$ > bg.pid; echo bg-out; sleep 60",
                                                       "description": "bg", "run_in_background": True}}]},
        {"tool_calls": [{"name": "TaskOutput", "arguments": {"task_id": "bash_1", "block": True, "timeout": 700}}]},
        {"text": "checked"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "bg", "--model", model, "--yolo", "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
    assert run.code == 0, run.stderr
    started, output = run.of_type("message", "tool_return_message")
    assert "bash_1" in started["tool_return"]
    assert "running" in output["tool_return"] and "bg-out" in output["tool_return"]
    time.sleep(0.2)
    assert not _alive(int((workdir / "bg.pid").read_text()))  # stopped when tether exited
