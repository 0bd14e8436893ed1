"""A shell command never runs before its process group is in the ledger (issue 22 item 1).

Unit tests drive `spawn_shell` with a real `ShellGroups`; the seeded kill test runs the real
`tether` and SIGKILLs it inside the spawn window (named failpoints, and a timer armed at the
spawn's start with seeded delays), then checks on disk and in /proc: every command that ran was
recorded, and after the next run nothing from the killed one is alive.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider
from tether.tools.process_group import spawn_shell
from tether.tools.shell_groups import LedgerUnwritable, ShellGroups, ledger_path

MODEL = "anthropic/claude-test"


def _ledger_pgids(path: Path) -> set[int]:
    if not path.exists():
        return set()
    return {json.loads(line)["pgid"] for line in path.read_text().splitlines() if line.strip()}


async def _run(command: str, cwd: Path, groups: ShellGroups) -> tuple[int | None, str]:
    process = await spawn_shell(command, cwd=cwd, env=dict(os.environ), groups=groups)
    await asyncio.wait_for(asyncio.shield(process.exited), 10)
    await process.wait_output_closed(5)
    await process.close()
    return process.exit_code(), process.output_text()


def test_the_group_is_in_the_ledger_before_the_command_runs(tmp_path: Path) -> None:
    groups = ShellGroups(tmp_path / "home" / "shell-groups" / "c.jsonl")
    code, out = asyncio.run(_run(f"cat {groups.path}; echo pid=$$", tmp_path, groups))
    assert code == 0
    seen = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    pid = int(out.split("pid=")[1])
    # What the command itself read from the ledger already named its own group.
    assert [r["pgid"] for r in seen] == [pid] and seen[0]["owner"] == os.getpid()
    assert oct(groups.path.stat().st_mode & 0o777) == oct(0o600)


def test_stdin_of_a_gated_command_is_empty(tmp_path: Path) -> None:
    groups = ShellGroups(tmp_path / "ledger.jsonl")
    code, out = asyncio.run(_run("wc -c; exit 3", tmp_path, groups))
    assert (code, out.strip()) == (3, "0")


@pytest.mark.parametrize("plant", ["symlink", "directory-is-a-file", "read-only"])
def test_an_unwritable_ledger_refuses_the_command(tmp_path: Path, plant: str) -> None:
    marker = tmp_path / "ran"
    ledger = tmp_path / "state" / "shell-groups" / "c.jsonl"
    ledger.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    if plant == "symlink":  # a sandboxed command planted it: it must not redirect tether's write
        ledger.symlink_to(victim)
    elif plant == "directory-is-a-file":
        ledger.parent.rmdir()
        ledger.parent.write_text("")
    else:
        ledger.parent.chmod(0o500)
        if os.geteuid() == 0:  # root ignores modes: use a read-only bind instead
            subprocess.run(["mount", "--bind", "-o", "ro", str(ledger.parent), str(ledger.parent)],
                           check=False)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(ledger.parent)], check=False)
    try:
        with pytest.raises(LedgerUnwritable) as caught:
            asyncio.run(_run(f"touch {marker}", tmp_path, ShellGroups(ledger)))
    finally:
        if plant == "read-only" and os.geteuid() == 0:
            subprocess.run(["umount", str(ledger.parent)], check=False)
    assert str(ledger) in str(caught.value) and "did not run" in str(caught.value)
    time.sleep(0.2)  # a command let through would have had time to run
    assert not marker.exists()
    assert victim.read_text() == "untouched\n"


def test_reaping_refuses_a_symlinked_ledger(tmp_path: Path) -> None:
    real = tmp_path / "forged.jsonl"
    real.write_text(json.dumps({"pgid": 1, "start": 1, "owner": 999999, "owner_start": 1}) + "\n")
    link = tmp_path / "ledger.jsonl"
    link.symlink_to(real)
    assert ShellGroups(link).reap_orphans() == []
    assert real.read_text().count("pgid") == 1  # not rewritten through the link


def test_ledger_path_is_under_tether_home_not_scratch(tmp_path: Path) -> None:
    assert ledger_path(tmp_path, "conv-1") == tmp_path / "shell-groups" / "conv-1.jsonl"


# --- the seeded kill test ----------------------------------------------------------------------

SEEDS = range(20)


def _processes_in(workdir: Path) -> set[int]:
    """Live, non-zombie processes whose working directory is `workdir` (the commands' cwd)."""
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/cwd") != str(workdir):
                continue
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :].split()[0] != b"Z":
            found.add(int(name))
    return found


def _ledgers(home: Path) -> list[Path]:
    return [*home.glob("shell-groups/*.jsonl"), *home.glob("tmp/*/shell-groups.jsonl")]


def _kill_points() -> list[dict[str, str]]:
    rng = random.Random(22)
    points = [{"TETHER_FAILPOINT": "spawn.before-record"}, {"TETHER_FAILPOINT": "spawn.after-record"}]
    points += [{"TETHER_FAILPOINT_SPAWN_KILL_MS": f"{rng.uniform(0, 12):.3f}"} for _ in SEEDS]
    return points


@pytest.mark.parametrize("point", _kill_points(), ids=lambda p: "-".join(p.values()))
def test_kill_in_the_spawn_window_leaves_nothing_unrecorded(
    point: dict[str, str], tmp_path: Path, tether_home: Path
) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    effects = workdir / "effects.txt"
    command = f"echo $$ >> {effects}; sleep 20; echo late >> {effects}"
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": command, "description": "d"}}]},
              {"text": "resumed"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL)
        first = subprocess.run(
            [TETHER, "-p", "go", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env={**env, **point}, cwd=workdir, capture_output=True, text=True, timeout=60,
        )
        assert first.returncode == -signal.SIGKILL, first.stderr
        conv = json.loads(first.stdout.splitlines()[0])["conversation_id"]
        time.sleep(0.05)  # a command let through unrecorded would be running by now
        recorded = set().union(*(_ledger_pgids(p) for p in _ledgers(tether_home)))
        ran = {int(x) for x in effects.read_text().split() if x.isdigit()} if effects.exists() else set()
        assert ran <= recorded, f"commands ran unrecorded: {ran - recorded}"
        for pid in _processes_in(workdir):
            assert os.getpgid(pid) in recorded, f"process {pid} is alive and unrecorded"
        resumed = run_tether(["-p", "again", "--conversation", conv], env=env, cwd=workdir)
    assert resumed.code == 0, resumed.stderr
    deadline = time.monotonic() + 5
    while _processes_in(workdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_in(workdir) == set()
    assert "late" not in (effects.read_text() if effects.exists() else "")
