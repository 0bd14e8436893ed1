"""End to end: the real `tether` script's help, completion and refusal of unknown commands."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.cli.main import COMMANDS
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def test_help_lists_every_command_with_its_summary_and_examples(workdir: Path) -> None:
    run = run_tether(["--help"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    for name, _aliases, _target, _named, summary in COMMANDS:
        assert any(line.split()[:1] == [name] and summary in line for line in run.stdout.splitlines()), name
    assert "examples:" in run.stdout and "tether completion bash" in run.stdout
    assert "--output-format FORMAT" in run.stdout and "§" not in run.stdout


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_every_subcommand_answers_help(name: str, workdir: Path, tether_home: Path) -> None:
    run = run_tether([name, "--help"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    module = next(c[2] for c in COMMANDS if c[0] == name).partition(":")[0]
    if importlib.util.find_spec(module.rsplit(".", 1)[0]) is None or importlib.util.find_spec(module) is None:
        assert (run.code, run.stderr) == (2, f"tether {name} is not available in this build\n")
    else:
        assert run.code == 0, run.stderr
        assert f"tether {name}" in run.stdout or name == "memfs", run.stdout
    assert not (tether_home / "conversations").exists()


@pytest.mark.parametrize(
    "argv", [["udpate"], ["cron", "list"], ["skills", "list"], ["mdoels"], ["update"],
             ["setup"], ["channel-gateway"], ["agnets", "list"]],
)
def test_unknown_or_missing_commands_never_reach_the_model(
    argv: list[str], workdir: Path, tether_home: Path
) -> None:
    with FakeProvider([{"text": "should not be asked"}]) as fake:
        run = run_tether(argv, env=tether_env(fake.url, MODEL), cwd=workdir)
        assert fake.requests == []
    if run.code != 2 or "unknown command" not in run.stderr:
        # a command another engineer has since shipped: it ran as itself, not as a prompt
        assert "not available in this build" in run.stderr or run.code in (0, 1), run
    assert not (tether_home / "conversations").exists()
    assert not (tether_home / "agents").exists()


@pytest.mark.parametrize("argv", [["-p", "update", "the", "changelog"], ["-p", "--", "update", "the", "changelog"]])
def test_words_after_p_or_double_dash_are_a_prompt(argv: list[str], workdir: Path) -> None:
    with FakeProvider([{"text": "done"}]) as fake:
        run = run_tether([*argv, "--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir)
        sent = [str(r) for r in fake.requests]
    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "done"
    assert any("update the changelog" in s for s in sent)


def test_bash_completion_from_the_real_script(workdir: Path) -> None:
    out = subprocess.run(
        ["bash", "-c",
         f'source <("{TETHER}" completion bash) || exit 9\n'
         'COMP_WORDS=(tether --output-format s); COMP_CWORD=2; _tether; echo "A:${COMPREPLY[*]}"\n'
         'COMP_WORDS=(tether mc); COMP_CWORD=1; _tether; echo "B:${COMPREPLY[*]}"\n'
         'COMP_WORDS=(tether --permission-m); COMP_CWORD=1; _tether; echo "C:${COMPREPLY[*]}"\n'
         'COMP_WORDS=(tether --permission-mode a); COMP_CWORD=2; _tether; echo "D:${COMPREPLY[*]}"\n'],
        capture_output=True, text=True, cwd=workdir, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["A:stream-json", "B:mcp", "C:--permission-mode", "D:acceptEdits"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_print(shell: str, workdir: Path) -> None:
    run = run_tether(["completion", shell], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 0 and "--output-format" in run.stdout
    assert ("#compdef tether" in run.stdout) if shell == "zsh" else ("complete -c tether" in run.stdout)
