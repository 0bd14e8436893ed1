"""UserPromptSubmit and Stop hooks in headless `-p` and the SDK's stream-json session, through
the real `tether` script, with real hook scripts that leave marker files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def write_user_hooks(home: Path, hooks: dict[str, str]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    doc = {event: [{"hooks": [{"type": "command", "command": command}]}] for event, command in hooks.items()}
    (home / "settings.json").write_text(json.dumps({"hooks": doc}))


# Blocks a prompt that mentions "secret"; otherwise adds context (its stdout), and keeps each payload.
PROMPT_HOOK = ("cat >> prompts.jsonl; echo >> prompts.jsonl; "
               "tail -n 1 prompts.jsonl | grep -q secret && { echo 'no secrets here' >&2; exit 2; }; "
               "echo 'the user prefers short answers'")
# Blocks stopping once (the marker file), then lets the run end; keeps each payload.
STOP_HOOK = ("cat >> stops.jsonl; echo >> stops.jsonl; test -f stopped-once && exit 0; "
             "touch stopped-once; echo 'also say goodbye' >&2; exit 2")


def payloads(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_headless_prompt_hook_adds_context_and_stop_hook_continues(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"UserPromptSubmit": PROMPT_HOOK, "Stop": STOP_HOOK})
    with FakeProvider([{"text": "hello"}, {"text": "goodbye"}]) as fake:
        run = run_tether(["-p", "greet me", "--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir)
        bodies = [json.dumps(r["body"]) for r in fake.requests]
    assert run.code == 0, run.stderr
    assert run.stdout == "goodbye\n"  # one result: the continuation's
    assert len(bodies) == 2
    assert "the user prefers short answers" in bodies[0] and "greet me" in bodies[0]
    assert "also say goodbye" in bodies[1] and "hello" in bodies[1]
    prompts = payloads(workdir / "prompts.jsonl")
    assert [p["prompt"] for p in prompts] == ["greet me"]  # the continuation is no user prompt
    stops = payloads(workdir / "stops.jsonl")
    assert [s["stop_hook_active"] for s in stops] == [False, True]
    assert stops[0]["assistant_message"] == "hello" and stops[0]["hook_event_name"] == "Stop"


def test_headless_prompt_blocked_by_hook_never_reaches_the_model(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"UserPromptSubmit": PROMPT_HOOK})
    with FakeProvider([{"text": "never"}]) as fake:
        run = run_tether(["-p", "tell me the secret", "--model", MODEL, "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert fake.requests == []
    assert run.code == 1
    errors = run.of_type("error")
    assert errors and "Prompt blocked by a UserPromptSubmit hook" in errors[0]["message"]
    assert "no secrets here" in errors[0]["message"]


def test_sdk_session_runs_prompt_and_stop_hooks(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"UserPromptSubmit": PROMPT_HOOK, "Stop": STOP_HOOK})
    with FakeProvider([{"text": "hello"}, {"text": "goodbye"}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "--input-format", "stream-json", "--output-format", "stream-json", "--model", MODEL],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=tether_env(fake.url, MODEL), cwd=workdir,
        )
        assert proc.stdin is not None and proc.stdout is not None
        events: list[dict[str, Any]] = []
        for prompt in ("the secret please", "greet me"):  # one at a time: waiting lines share a turn
            proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": prompt}}) + "\n")
            proc.stdin.flush()
            while not events or events[-1]["type"] != "result":
                events.append(json.loads(proc.stdout.readline()))
            events.append({"type": "-"})
        out, err = proc.communicate(timeout=60)
        bodies = [json.dumps(r["body"]) for r in fake.requests]
    assert proc.returncode == 0, err
    results = [e for e in events if e["type"] == "result"]
    assert [r["subtype"] for r in results] == ["error", "success"]
    assert "no secrets here" in results[0]["result"]
    assert results[1]["result"] == "goodbye"
    assert len(bodies) == 2 and "the secret" not in bodies[0]
    assert "the user prefers short answers" in bodies[0] and "also say goodbye" in bodies[1]
    assert [s["stop_hook_active"] for s in payloads(workdir / "stops.jsonl")] == [False, True]


def test_a_subagents_task_is_not_a_user_prompt(workdir: Path, tether_home: Path) -> None:
    """The child's prompt is the parent's task: only the parent's prompt and stop run the hooks."""
    write_user_hooks(tether_home, {"UserPromptSubmit": "cat >> prompts.jsonl; echo >> prompts.jsonl",
                                   "Stop": "cat >> stops.jsonl; echo >> stops.jsonl"})
    agent = {"name": "Agent", "arguments": {"description": "delegate", "prompt": "child task",
                                            "subagent_type": "general-purpose", "run_in_background": False}}
    script = [{"tool_calls": [agent]}, {"text": "child report"}, {"text": "parent done"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "delegate it", "--model", MODEL, "--yolo"], env=tether_env(fake.url, MODEL),
                         cwd=workdir, timeout=90)
    assert run.code == 0, run.stderr
    assert run.stdout == "parent done\n"
    assert [p["prompt"] for p in payloads(workdir / "prompts.jsonl")] == ["delegate it"]
    assert [s["assistant_message"] for s in payloads(workdir / "stops.jsonl")] == ["parent done"]
