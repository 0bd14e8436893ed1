"""The subcommand table: every entry resolves, near misses are refused, prompts still pass."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tether.cli import main as cli_main
from tether.cli.completion import script
from tether.cli.flags import _parser
from tether.cli.help_text import OPTION_HELP


def test_every_table_entry_names_a_module_function_and_a_summary() -> None:
    names = cli_main.command_names()
    assert len(names) == len(set(names)), "a name is in the table twice"
    for name, _aliases, target, _passes_name, summary in cli_main.COMMANDS:
        assert summary and "§" not in summary, name
        module_name, _, function = target.partition(":")
        assert module_name.startswith("tether.") and function, target
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue  # another engineer's subcommand not in this build yet: dispatch says so
        assert callable(getattr(module, function)), target


@pytest.mark.parametrize("name", ["cron", "update", "upgrade", "backend", "channel-gateway", "mcp",
                                  "models", "completion", "memfs"])
def test_required_subcommands_are_in_the_table(name: str) -> None:
    assert cli_main.find_command(name) is not None


@pytest.mark.parametrize(
    ("word", "expected"),
    [("udpate", "update"), ("mdoels", "models"), ("agnets", "agents"), ("crn", "cron"),
     ("serve", "server"), ("memroy", "memory"), ("connnect", "connect"), ("trsut", "trust"),
     ("skils", "skills"), ("instal", "install")],
)
def test_near_misses_exit_2_with_a_suggestion(
    word: str, expected: str, capsys: pytest.CaptureFixture[str], tether_home: Path
) -> None:
    assert cli_main.main([word, "list"]) == 2
    err = capsys.readouterr().err
    assert f"unknown command {word!r}; did you mean " in err and repr(expected) in err.split("did you mean")[1]
    assert not tether_home.exists()


@pytest.mark.parametrize("word", ["setup", "teleport", "shared-memory",
                                  "trajectories", "environments", "local-backend"])
def test_reference_commands_tether_lacks_exit_2(
    word: str, capsys: pytest.CaptureFixture[str], tether_home: Path
) -> None:
    assert cli_main.main([word, "list"]) == 2
    assert f"unknown command {word!r}" in capsys.readouterr().err
    assert not tether_home.exists()


@pytest.mark.parametrize("word", ["run", "test", "fix", "explain", "why", "add", "list", "make",
                                  "review", "refactor", "summarise", "write", "remove", "rename",
                                  "instead", "settle", "ends"])
def test_everyday_first_words_are_not_taken_for_commands(word: str) -> None:
    assert cli_main._refuse_near_miss(word) is None


def test_edit_distance_counts_a_transposition_once() -> None:
    assert cli_main._edit_distance("mcp", "mpc") == 1
    assert cli_main._edit_distance("update", "update") == 0
    assert cli_main._edit_distance("kitten", "sitting") == 3


def test_every_run_option_has_help_without_section_numbers() -> None:
    parser = _parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings or action.dest} has no help text"
        assert "§" not in action.help
        assert action.dest in OPTION_HELP, f"{action.dest}: add it to cli/help_text.OPTION_HELP"


def test_completion_scripts_name_every_option_and_command() -> None:
    options = [s for a in _parser()._actions for s in a.option_strings]
    for shell in ("bash", "zsh", "fish"):
        text = script(shell)
        for name in cli_main.command_names():
            assert name in text, (shell, name)
        for option in options:
            spelled = option.lstrip("-") if shell == "fish" else option
            assert spelled in text, (shell, option)
