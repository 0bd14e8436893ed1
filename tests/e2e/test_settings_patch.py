"""The bundled self-configuration script end to end: it changes a local agent's model and system
prompt (dry run first, then live with the confirmation), the next headless turn's request shows
them; its guards, redaction and exit codes; and the same patch against a server by base URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.e2e.support import run_tether, tether_env
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
SKILL = Path(tether.__file__).parent / "runtime" / "extensions" / "bundled_skills" / "self-configuration"
SCRIPT = SKILL / "scripts" / "update_agent_settings.py"


def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("AGENT_ID", "CONVERSATION_ID")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=60
    )


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def agent(tether_home: Path) -> str:
    record = LocalStore(tether_home).create_agent(model=MODEL, system="You are the old prompt.")
    return record.id


def test_skill_is_bundled_with_its_script() -> None:
    text = (SKILL / "SKILL.md").read_text()
    assert text.startswith("---\nname: self-configuration\n")
    assert "scripts/update_agent_settings.py" in text and SCRIPT.is_file()


def test_agent_changes_its_own_model_and_prompt_and_the_next_turn_uses_them(
    workdir: Path, tether_home: Path
) -> None:
    new_prompt = workdir.parent / "prompt.md"
    new_prompt.write_text("You are the NEW prompt, set by the agent itself.")
    base = f"{sys.executable} {SCRIPT} --target agent"
    dry = f"{base} --model anthropic/claude-other --system-file {new_prompt} --dry-run"
    live = f"{base} --model anthropic/claude-other --system-file {new_prompt} --confirm-system-replacement"
    turns = [
        {"tool_calls": [_bash(dry)]},
        {"tool_calls": [_bash(live)]},
        {"text": "done"},
        {"text": "I am configured"},
    ]
    with FakeProvider(turns) as fake:
        env = tether_env(fake.url, MODEL)
        first = run_tether(
            [
                "-p",
                "reconfigure yourself",
                "--model",
                MODEL,
                "--yolo",
                "--output-format",
                "stream-json",
            ],
            env=env,
            cwd=workdir,
        )
        assert first.code == 0, first.stderr
        agent_id = first.events[0]["agent_id"]
        returns = [e["tool_return"] for e in first.of_type("message", "tool_return_message")]
        preview = json.loads(returns[0])
        assert preview["target"] == "agent" and preview["id"] == agent_id
        assert preview["patch"]["model"] == "anthropic/claude-other"
        assert preview["patch"]["system"].startswith("You are the NEW prompt")
        changed = json.loads(returns[1])
        assert changed["model"] == "anthropic/claude-other" and changed["id"] == agent_id
        record = LocalStore(tether_home).get_agent(agent_id)
        assert record.model == "anthropic/claude-other"
        assert record.system == new_prompt.read_text()
        second = run_tether(
            ["-p", "who are you", "--agent", agent_id, "--output-format", "json"],
            env=env,
            cwd=workdir,
        )
        assert second.code == 0, second.stderr
        body = fake.requests[-1]["body"]
        assert body["model"] == "claude-other"
        assert "You are the NEW prompt, set by the agent itself." in json.dumps(body["system"])
        assert "old prompt" not in json.dumps(body["system"])
        assert fake.violations == []


def _bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "configure"}}


def test_dry_run_changes_nothing_and_live_needs_the_confirmation(
    tether_home: Path, agent: str, tmp_path: Path
) -> None:
    prompt = tmp_path / "p.md"
    prompt.write_text("replacement prompt")
    env = {"AGENT_ID": agent}
    before = (LocalStore(tether_home).get_agent(agent)).to_dict()
    preview = ok(
        script(
            "--target",
            "agent",
            "--system-file",
            str(prompt),
            "--model",
            "openai/gpt-x",
            "--dry-run",
            env=env,
        )
    )
    assert preview["preview"]["model"] == "openai/gpt-x" and preview["id"] == agent
    assert LocalStore(tether_home).get_agent(agent).to_dict() == before
    refused = script("--target", "agent", "--system-file", str(prompt), env=env)
    assert refused.returncode == 2 and "--confirm-system-replacement" in refused.stderr
    assert LocalStore(tether_home).get_agent(agent).to_dict() == before
    done = ok(
        script(
            "--target",
            "agent",
            "--system-file",
            str(prompt),
            "--confirm-system-replacement",
            env=env,
        )
    )
    assert done["system_chars"] == len("replacement prompt")
    assert LocalStore(tether_home).get_agent(agent).system == "replacement prompt"


def test_settings_files_merge_window_and_compaction(
    tether_home: Path, agent: str, tmp_path: Path
) -> None:
    env = {"AGENT_ID": agent}
    first = tmp_path / "ms.json"
    first.write_text(json.dumps({"temperature": 0.2, "max_output_tokens": 1000}))
    ok(script("--target", "agent", "--model-settings-file", str(first), env=env))
    second = tmp_path / "ms2.json"
    second.write_text(json.dumps({"temperature": 0.7}))
    shown = ok(
        script(
            "--target",
            "agent",
            "--model-settings-file",
            str(second),
            "--merge-model-settings",
            "--context-window-limit",
            "64000",
            env=env,
        )
    )
    assert shown["model_settings"] == {
        "temperature": 0.7,
        "max_output_tokens": 1000,
        "context_window_limit": 64000,
    }
    assert shown["context_window_limit"] == 64000
    ok(script("--target", "agent", "--context-window-limit", "null", env=env))
    assert LocalStore(tether_home).get_agent(agent).model_settings == {
        "temperature": 0.7,
        "max_output_tokens": 1000,
    }
    comp = tmp_path / "c.json"
    comp.write_text(json.dumps({"mode": "all", "clip_chars": 5000}))
    ok(script("--target", "agent", "--compaction-settings-file", str(comp), env=env))
    assert LocalStore(tether_home).get_agent(agent).extra["compaction_settings"] == {
        "mode": "all",
        "clip_chars": 5000,
    }
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mode": "sometimes"}))
    proc = script("--target", "agent", "--compaction-settings-file", str(bad), env=env)
    assert proc.returncode == 1 and "mode must be sliding_window or all" in proc.stderr


def test_conversation_target_changes_the_conversation_model(tether_home: Path, agent: str) -> None:
    conv = LocalStore(tether_home).create_conversation(agent)
    out = ok(
        script(
            "--target",
            "conversation",
            "--model",
            "openai/gpt-y",
            env={"AGENT_ID": agent, "CONVERSATION_ID": conv.id},
        )
    )
    assert out["model"] == "openai/gpt-y"
    assert LocalStore(tether_home).get_conversation(conv.id, agent).model == "openai/gpt-y"
    assert LocalStore(tether_home).get_agent(agent).model == MODEL


def test_show_redacts_secrets(tether_home: Path, agent: str, tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    settings.write_text(
        json.dumps({"api_key": "sk-SECRET", "nested": {"authToken": "t0k"}, "temperature": 1})
    )
    ok(script("--target", "agent", "--model-settings-file", str(settings), env={"AGENT_ID": agent}))
    proc = script("--target", "agent", "--show", env={"AGENT_ID": agent})
    shown = ok(proc)
    assert "sk-SECRET" not in proc.stdout and "t0k" not in proc.stdout
    assert shown["model_settings"] == {
        "api_key": "[redacted]",
        "nested": {"authToken": "[redacted]"},
        "temperature": 1,
    }
    assert "system" not in shown and shown["system_chars"] == len("You are the old prompt.")


@pytest.mark.parametrize(
    ("args", "env", "why"),
    [
        (["--show"], {}, "--target"),
        (["--target", "agent", "--show"], {}, "--agent-id"),
        (["--target", "agent", "--show", "--model", "m/x"], {"AGENT_ID": "{a}"}, "--show only"),
        (["--target", "agent"], {"AGENT_ID": "{a}"}, "nothing to change"),
        (
            ["--target", "agent", "--merge-model-settings", "--model", "m/x"],
            {"AGENT_ID": "{a}"},
            "needs --model-settings-file",
        ),
        (
            ["--target", "agent", "--merge-compaction-settings", "--model", "m/x"],
            {"AGENT_ID": "{a}"},
            "needs --compaction-settings-file",
        ),
        (
            ["--target", "agent", "--confirm-system-replacement", "--model", "m/x"],
            {"AGENT_ID": "{a}"},
            "goes with --system-file",
        ),
        (
            ["--target", "agent", "--system-file", "{empty}", "--confirm-system-replacement"],
            {"AGENT_ID": "{a}"},
            "is empty",
        ),
        (
            ["--target", "agent", "--model-settings-file", "{list}"],
            {"AGENT_ID": "{a}"},
            "must hold a JSON object",
        ),
        (
            ["--target", "agent", "--context-window-limit", "lots"],
            {"AGENT_ID": "{a}"},
            "positive integer or null",
        ),
        (
            ["--target", "agent", "--agent-id", "agent-local-other", "--model", "m/x"],
            {"AGENT_ID": "{a}"},
            "--allow-other-agent",
        ),
        (
            ["--target", "agent", "--agent-id", "{a}", "--allow-other-agent", "--model", "m/x"],
            {"AGENT_ID": "{a}"},
            "your own",
        ),
        (["--target", "conversation", "--model", "m/x"], {"AGENT_ID": "{a}"}, "--conversation-id"),
        (
            ["--target", "conversation", "--name", "x"],
            {"AGENT_ID": "{a}", "CONVERSATION_ID": "c"},
            "--target agent only",
        ),
        (
            ["--target", "agent", "--model", "m/x", "--base-url", "http://127.0.0.1:9"],
            {"AGENT_ID": "{a}"},
            "API key",
        ),
    ],
)
def test_guards_exit_2_and_change_nothing(
    tether_home: Path, agent: str, tmp_path: Path, args: list[str], env: dict[str, str], why: str
) -> None:
    (tmp_path / "empty.md").write_text("  \n")
    (tmp_path / "list.json").write_text("[1, 2]")
    subs = {
        "{a}": agent,
        "{empty}": str(tmp_path / "empty.md"),
        "{list}": str(tmp_path / "list.json"),
    }
    before = LocalStore(tether_home).get_agent(agent).to_dict()
    proc = script(*[subs.get(a, a) for a in args], env={k: subs.get(v, v) for k, v in env.items()})
    assert proc.returncode == 2, proc.stderr
    assert why in proc.stderr and proc.stdout == ""
    assert LocalStore(tether_home).get_agent(agent).to_dict() == before


def test_an_unknown_local_agent_is_exit_1(tether_home: Path) -> None:
    proc = script("--target", "agent", "--show", env={"AGENT_ID": "agent-local-missing"})
    assert proc.returncode == 1 and "No agent 'agent-local-missing'" in proc.stderr


# --- against a server by base URL ---------------------------------------------------------------


class _Agents(BaseHTTPRequestHandler):
    agents: dict[str, dict[str, Any]] = {}
    seen: list[tuple[str, str, str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _agent(self) -> dict[str, Any] | None:
        if self.headers.get("Authorization") != "Bearer sk-letta":
            self._reply(401, {"detail": "bad token"})
            return None
        agent = self.agents.get(self.path.removeprefix("/v1/agents/"))
        if agent is None:
            self._reply(404, {"detail": "no such agent"})
        return agent

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", ""), None))
        agent = self._agent()
        if agent is not None:
            self._reply(200, agent)

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("PATCH", self.path, self.headers.get("Authorization", ""), body))
        agent = self._agent()
        if agent is not None:
            agent.update(body)
            self._reply(200, agent)


@pytest.fixture
def api() -> Iterator[str]:
    _Agents.agents = {
        "agent-123": {
            "id": "agent-123",
            "name": "remote",
            "model": "openai/gpt-4o",
            "system": "remote prompt",
            "llm_config": {"context_window": 128000, "api_key": "sk-inner"},
            "secret_field": "x",
        }
    }
    _Agents.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Agents)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_remote_agent_is_read_and_patched_by_base_url(api: str) -> None:
    env = {"AGENT_ID": "agent-123", "LETTA_API_KEY": "sk-letta", "LETTA_BASE_URL": api}
    shown = ok(script("--target", "agent", "--show", env=env))
    assert shown["llm_config"] == {"context_window": 128000} and "secret_field" not in shown
    preview = ok(
        script(
            "--target",
            "agent",
            "--model",
            "anthropic/claude-x",
            "--context-window-limit",
            "32000",
            "--dry-run",
            env=env,
        )
    )
    assert preview["patch"] == {"model": "anthropic/claude-x", "context_window_limit": 32000}
    assert [s[0] for s in _Agents.seen] == ["GET", "GET"]
    done = ok(
        script(
            "--target",
            "agent",
            "--model",
            "anthropic/claude-x",
            "--context-window-limit",
            "32000",
            env=env,
        )
    )
    assert done["model"] == "anthropic/claude-x" and done["context_window_limit"] == 32000
    method, path, auth, body = _Agents.seen[-1]
    assert (method, path, auth) == ("PATCH", "/v1/agents/agent-123", "Bearer sk-letta")
    assert body == {"model": "anthropic/claude-x", "context_window_limit": 32000}
    wrong = script("--target", "agent", "--show", env={**env, "LETTA_API_KEY": "nope"})
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr


def test_the_skill_is_discovered_as_bundled(tmp_path: Path) -> None:
    from tether.runtime.extensions.skills import discover_skills

    catalog = discover_skills(
        home=tmp_path, cwd=tmp_path, sources=frozenset({"bundled"}), project_trusted=False
    )
    skill = catalog.all()["self-configuration"]
    assert skill.source == "bundled" and "update_agent_settings.py" in skill.description
    loaded = catalog.load("self-configuration")
    assert loaded is not None and "--confirm-system-replacement" in loaded.body
