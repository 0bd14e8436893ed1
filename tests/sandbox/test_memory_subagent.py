"""The memory-subagent sandbox (reference §8): a memory subagent runs as a whole process inside
bwrap, writing only under TETHER_HOME and the parent's memory; the workspace is read-only and
other agents' memory is hidden. Real bwrap, real child `tether`, fake provider on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.requirements import need_bwrap
from tether.runtime.agents.subagents import (
    MEMORY_PROFILE,
    ParentScope,
    Subagents,
    discover_types,
    parse_type,
)
from tether.sandbox import SandboxStatus, memory_subagent_policy
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
CHILD_MODEL = "openai-chat/child-model"


@pytest.fixture
def bwrap_available() -> None:
    need_bwrap(seccomp=True)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "step"}}


def memory_call(kind: str = "memory") -> dict[str, Any]:
    return {
        "name": "Agent",
        "arguments": {
            "description": "tidy memory",
            "prompt": "remember things",
            "subagent_type": kind,
            "run_in_background": False,
            "model": CHILD_MODEL,
        },
    }


def test_memory_types_and_profile_field() -> None:
    types = discover_types(Path("/nonexistent"), Path("/nonexistent"), project_trusted=False)
    confined = {name for name, t in types.items() if t.launch_profile == MEMORY_PROFILE}
    assert confined == {"memory", "reflection", "history-analyzer"}  # init writes project files
    custom = parse_type("---\nname: notes\nlaunchProfile: memory-subagent\n---\nbody", "x.md")
    assert custom.launch_profile == MEMORY_PROFILE
    opted_out = parse_type("---\nname: memory\nlaunchProfile: default\n---\nbody", "y.md")
    assert opted_out.launch_profile is None


def test_whole_process_policy_shape(tmp_path: Path) -> None:
    th = tmp_path / "th"
    parent_git = th / "agents" / "p1" / "memory" / ".git"
    parent_git.mkdir(parents=True)
    (parent_git / "config").write_text("[core]\n")
    ws = tmp_path / "ws"
    policy = memory_subagent_policy(
        th,
        None,
        "p1",
        home=tmp_path / "home",
        base_writable=[th],
        hidden_agents=["p1", "other", "another"],
        writable_memories=["p1"],
        readonly=[ws],
    )
    agents = th.resolve() / "agents"
    assert policy.writable_roots == (th.resolve(), agents / "p1" / "memory")
    assert policy.readonly_roots == (
        th.resolve() / "bin", agents / "p1", parent_git.resolve() / "config", ws.resolve()
    )
    assert policy.denied_roots[:2] == (
        agents / "other",
        agents / "another",
    )  # not the parent's tree
    assert policy.network and policy.restrict_writes


@pytest.mark.usefixtures("bwrap_available")
@pytest.mark.parametrize("switch", [None, "1"])  # unset, or every shell sandboxed as well
def test_memory_subagent_writes_memory_but_not_the_workspace(
    workdir: Path, tether_home: Path, tmp_path: Path, switch: str | None
) -> None:
    other = tether_home / "agents" / "agent-other" / "memory"
    other.mkdir(parents=True)
    (other / "secret.md").write_text("TOP SECRET\n")
    escape = tmp_path / "home" / "escape.txt"
    child_script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                bash(f"touch {workdir}/from-memory-subagent.txt"),
                bash('echo remembered > "$MEMORY_DIR/notes.md" && echo wrote-memory'),
                bash(f"cat {other}/secret.md"),
                bash(f"echo x > {escape}"),
                bash('echo "sandbox=$TETHER_SANDBOX"'),
            ]
        },
        {"text": "memory tidied"},
    ]
    parent_script: list[dict[str, Any]] = [{"tool_calls": [memory_call()]}, {"text": "done"}]
    with FakeProvider(parent_script) as parent, FakeProvider(child_script) as child:
        env = tether_env(
            parent.url, MODEL, {"OPENAI_BASE_URL": child.url + "/v1", "OPENAI_API_KEY": "sk-child"}
        )
        if switch is not None:
            env["TETHER_FS_SANDBOX"] = switch
        run = run_tether(
            ["-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=120,
        )
        results = json.dumps(child.requests[1]["body"]["messages"][-5:])
    assert run.code == 0, run.stderr
    parent_id = run.events[0]["agent_id"]
    report = run.of_type("message", "tool_return_message")[0]["tool_return"]
    assert "status=completed" in report and "memory tidied" in report
    assert not (workdir / "from-memory-subagent.txt").exists()
    assert "Read-only file system" in results
    memory = tether_home / "agents" / parent_id / "memory"
    assert (memory / "notes.md").read_text() == "remembered\n" and "wrote-memory" in results
    assert "TOP SECRET" not in results and not escape.exists()
    assert "sandbox=bwrap" in results
    # The child kept its own records under TETHER_HOME, and the other agent's memory is untouched.
    agents = json.loads(run_tether(["agents", "list"], env=env, cwd=workdir).stdout)
    assert any("type:memory" in a["tags"] for a in agents)
    assert (other / "secret.md").read_text() == "TOP SECRET\n"


@pytest.mark.usefixtures("bwrap_available")
def test_fs_sandbox_0_leaves_memory_subagents_unconfined(workdir: Path) -> None:
    child_script: list[dict[str, Any]] = [
        {"tool_calls": [bash('touch from-memory-subagent.txt; echo "sandbox=$TETHER_SANDBOX."')]},
        {"text": "done"},
    ]
    parent_script: list[dict[str, Any]] = [{"tool_calls": [memory_call()]}, {"text": "done"}]
    with FakeProvider(parent_script) as parent, FakeProvider(child_script) as child:
        env = tether_env(
            parent.url,
            MODEL,
            {
                "OPENAI_BASE_URL": child.url + "/v1",
                "OPENAI_API_KEY": "sk-child",
                "TETHER_FS_SANDBOX": "0",
            },
        )
        run = run_tether(
            ["-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=120,
        )
        results = json.dumps(child.requests[1]["body"]["messages"][-1:])
    assert run.code == 0, run.stderr
    assert (workdir / "from-memory-subagent.txt").exists() and "sandbox=." in results
    assert "unconfined" not in run.stderr  # turned off on purpose: nothing to say


def test_without_a_backend_the_memory_subagent_runs_and_says_so_once(
    workdir: Path,
    tether_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [bash('touch unconfined.txt; echo "$MEMORY_DIR" > memdir.txt')]},
        {"text": "one"},
        {"text": "two"},
    ]
    with FakeProvider(script) as fake:
        for key, value in tether_env(fake.url, MODEL).items():
            monkeypatch.setenv(key, value)
        scope = ParentScope("agent-parent", "default", MODEL, workdir, tether_home=tether_home)
        types = discover_types(tether_home, workdir, project_trusted=False)
        none = SandboxStatus(None, None, False, None, False, ["bwrap not installed (test)"])
        subagents = Subagents(scope, types, tmp_scratch(tether_home), sandbox_status=none)
        args = {
            "description": "d",
            "prompt": "p",
            "subagent_type": "memory",
            "run_in_background": False,
        }

        async def twice() -> list[Any]:
            return [
                await subagents.launch(args, asyncio.Event()),
                await subagents.launch(args, asyncio.Event()),
            ]

        first, second = asyncio.run(twice())
    assert not first.is_error and not second.is_error, (first.output, second.output)
    assert (workdir / "unconfined.txt").exists()  # it ran, unconfined
    assert (workdir / "memdir.txt").read_text().strip() == str(
        tether_home / "agents" / "agent-parent" / "memory"
    )
    assert capsys.readouterr().err.count("memory subagents run unconfined") == 1


def tmp_scratch(home: Path) -> Path:
    return home / "tmp" / "parent-conversation"


def test_memory_subagent_on_the_landlock_backend(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    """The same confinement with Landlock + seccomp alone (TETHER_SANDBOX_BACKEND=landlock)."""
    from tether.sandbox.landlock import landlock_status

    if landlock_status().abi is None:
        from tests.requirements import missing

        missing("Landlock", landlock_status().reason)
    other = tether_home / "agents" / "agent-other" / "memory"
    other.mkdir(parents=True)
    (other / "secret.md").write_text("TOP SECRET\n")
    escape = tmp_path / "home" / "escape.txt"
    child_script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                bash(f"touch {workdir}/from-memory-subagent.txt"),
                bash('echo remembered > "$MEMORY_DIR/notes.md" && echo wrote-memory'),
                bash(f"cat {other}/secret.md"),
                bash(f"echo x > {escape}"),
                bash('echo "sandbox=$TETHER_SANDBOX"'),
            ]
        },
        {"text": "memory tidied"},
    ]
    parent_script: list[dict[str, Any]] = [{"tool_calls": [memory_call()]}, {"text": "done"}]
    with FakeProvider(parent_script) as parent, FakeProvider(child_script) as child:
        env = tether_env(
            parent.url, MODEL, {"OPENAI_BASE_URL": child.url + "/v1", "OPENAI_API_KEY": "sk-child",
                                "TETHER_SANDBOX_BACKEND": "landlock"}
        )
        run = run_tether(
            ["-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=120,
        )
        assert len(child.requests) == 2, run.stdout[-3000:]
        results = json.dumps(child.requests[1]["body"]["messages"][-5:])
    assert run.code == 0, run.stderr
    parent_id = run.events[0]["agent_id"]
    report = run.of_type("message", "tool_return_message")[0]["tool_return"]
    assert "status=completed" in report and "memory tidied" in report, report
    assert not (workdir / "from-memory-subagent.txt").exists()
    memory = tether_home / "agents" / parent_id / "memory"
    assert (memory / "notes.md").read_text() == "remembered\n" and "wrote-memory" in results
    assert "TOP SECRET" not in results and not escape.exists()
    assert "sandbox=landlock" in results
