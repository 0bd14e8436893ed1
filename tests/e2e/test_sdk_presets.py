"""The Letta Code SDK's system prompt presets through the real `tether`: each name the SDK sends
with `--system` (its dist/index.js `validPresets`) reaches the model as that preset's prompt, and
a name tether has no prompt for is refused, naming the valid ones, before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
# What the SDK sends (@letta-ai/letta-code-sdk dist/index.js: validPresets), and a phrase only
# that preset's prompt carries.
SDK_PRESETS = {
    "letta-claude": ("TodoWrite to track", True),
    "letta-codex": ("exec_command", True),
    "letta-gemini": ("run_shell_command", True),
    "claude": ("TodoWrite to track", False),
    "codex": ("exec_command", False),
    "gemini": ("run_shell_command", False),
}
MEMORY_LINE = "You keep a persistent memory across conversations"


def _system_of(body: dict) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(part.get("text", "") for part in system)
    return str(system)


@pytest.mark.parametrize("preset", sorted(SDK_PRESETS))
def test_an_sdk_preset_becomes_its_prompt(preset: str, workdir: Path) -> None:
    phrase, memory = SDK_PRESETS[preset]
    with FakeProvider([{"text": "ok"}]) as fake:
        run = run_tether(["-p", "hi", "-m", MODEL, "--system", preset, "--output-format", "json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert run.code == 0, run.stderr
        system = _system_of(fake.requests[0]["body"])
    assert phrase in system and "You are tether" in system
    assert (MEMORY_LINE in system) is memory
    others = {p for p, _ in SDK_PRESETS.values()} - {phrase}
    assert not any(other in system for other in others), system


def test_default_is_tethers_own_prompt(workdir: Path) -> None:
    with FakeProvider([{"text": "ok"}]) as fake:
        run = run_tether(["-p", "hi", "-m", MODEL, "--system", "default"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert run.code == 0, run.stderr
        system = _system_of(fake.requests[0]["body"])
    assert "You are tether" in system and MEMORY_LINE not in system
    assert not any(p in system for p, _ in SDK_PRESETS.values())


def test_an_unknown_preset_is_refused_naming_the_valid_ones(workdir: Path) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        run = run_tether(["-p", "hi", "-m", MODEL, "--system", "letta-llama"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert fake.requests == []
    assert run.code == 1
    assert "--system 'letta-llama' is not valid" in run.stderr
    assert "letta-codex" in run.stderr and "gemini" in run.stderr
    home = Path(os.environ["TETHER_HOME"])  # tests/conftest.py's, handed to the child
    assert not list(home.rglob("conversation.json")) and not list(home.rglob("agent.json"))
