"""`tether completion bash|zsh|fish`: shell completion scripts generated from the run parser.

The options, their help and the subcommands come from the same objects `tether --help` prints
(`cli/flags._parser()` dressed by `cli/help_text`, and `cli/main.COMMANDS`), so a new flag or
subcommand completes without anyone editing a script. The values of `--model`, `--agent` and
`--conversation` come from `tether completion --list models|agents|conversations` (hidden, no
network, nothing created): the providers' catalogue and the models agents use, and the agents
and conversations under TETHER_HOME, as the scripts ask for them at completion time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.backends.local.store import LocalStore

SHELLS = ("bash", "zsh", "fish")

USAGE = """usage: tether completion bash|zsh|fish

Print a completion script for the shell. Install it with, for example:
  tether completion bash > ~/.local/share/bash-completion/completions/tether
  tether completion zsh > "${fpath[1]}/_tether"        (then restart zsh)
  tether completion fish > ~/.config/fish/completions/tether.fish
"""


def run_completion(argv: Sequence[str]) -> int:
    args = list(argv)
    if args in (["--help"], ["-h"], []):
        (sys.stdout if args else sys.stderr).write(USAGE)
        return 0 if args else 2
    if len(args) == 2 and args[0] == "--list":
        return _print_values(args[1])
    if len(args) != 1 or args[0] not in SHELLS:
        sys.stderr.write(f"Error: unknown shell {' '.join(args)!r}; choose one of: bash, zsh, fish\n")
        return 2
    sys.stdout.write(script(args[0]))
    return 0


LISTED = {"model": "models", "agent": "agents", "conversation": "conversations"}  # dest -> --list


def _print_values(kind: str) -> int:
    if kind not in LISTED.values():
        sys.stderr.write(f"Error: --list {kind!r}: choose one of: {', '.join(LISTED.values())}\n")
        return 2
    try:
        values = {"models": _models, "agents": _agents, "conversations": _conversations}[kind]()
    except (OSError, ValueError):
        values = []  # a half-written store completes nothing rather than printing a traceback
    sys.stdout.write("".join(f"{v}\n" for v in values))
    return 0


def _store() -> LocalStore | None:
    import os

    from tether.backends.local.store import LocalStore
    from tether.runtime.session.session import tether_home

    home = tether_home(os.environ)
    return LocalStore(home) if home.is_dir() else None


def _models() -> list[str]:
    """The models agents here use, then each provider's default model in tether's order."""
    from tether.providers.catalog import DEFAULT_ORDER, PRESETS

    store = _store()
    used = [a.model for a in store.list_agents() if a.model] if store is not None else []
    known = [f"{p}/{PRESETS[p].default_model}" for p in (*DEFAULT_ORDER, *PRESETS)]
    return list(dict.fromkeys([*used, *known]))


def _agents() -> list[str]:
    store = _store()
    return [a.id for a in store.list_agents()] if store is not None else []


def _conversations() -> list[str]:
    """Conversation ids, most recently written first (and each agent id, its main history)."""
    store = _store()
    if store is None:
        return []
    found = []
    for path in (store.home / "conversations").glob("*/conversation.json"):
        data = _read_json(path)
        if isinstance(data, dict) and isinstance(data.get("id"), str) and data["id"] != "default":
            written = path.with_name("messages.jsonl")
            found.append((written.stat().st_mtime if written.exists() else 0.0, data["id"]))
    return [c for _m, c in sorted(found, reverse=True)] + _agents()


def _read_json(path: Path) -> Any:
    import orjson

    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def script(shell: str) -> str:
    spec = _spec()
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](spec)


class _Option:
    __slots__ = ("help", "listed", "names", "takes_value", "values")

    def __init__(self, names: list[str], help: str, takes_value: bool, values: tuple[str, ...],
                 listed: str = ""):
        self.names, self.help, self.takes_value, self.values = names, help, takes_value, values
        self.listed = listed  # values from `tether completion --list <this>` at completion time


def _spec() -> tuple[list[_Option], list[tuple[str, str]]]:
    """(options, [(command, summary)]) from the run parser and the subcommand table."""
    from tether.cli.flags import _parser
    from tether.cli.main import COMMANDS

    values = _value_lists()
    options = []
    for action in _parser()._actions:
        if not action.option_strings:
            continue
        takes_value = action.nargs != 0
        help_text = (action.help or "").split(";")[0].strip()
        options.append(_Option(list(action.option_strings), help_text, takes_value,
                               values.get(action.dest, ()), LISTED.get(action.dest, "")))
    commands = [(n, summary) for name, aliases, _t, _n, summary in COMMANDS for n in (name, *aliases)]
    return options, commands


def _value_lists() -> dict[str, tuple[str, ...]]:
    """The closed value sets of options, from the constants flags.py validates against."""
    from tether.cli import flags
    from tether.core.permissions.modes import PERMISSION_MODES

    return {
        "output_format": flags.OUTPUT_FORMATS,
        "input_format": ("stream-json",),
        "permission_mode": PERMISSION_MODES,
        "system": flags.SYSTEM_PRESETS,
        "reflection_trigger": flags.REFLECTION_TRIGGERS,
        "reflection_behavior": ("reminder", "auto-launch"),
        "memfs_startup": flags.MEMFS_STARTUP,
        "skill_sources": flags.SKILL_SOURCES,
        "backend": ("local", "cloud"),
        **_toolsets(),
    }


def _toolsets() -> dict[str, tuple[str, ...]]:
    try:  # the toolset engineer's module; absent in builds without it
        from tether.tools.toolsets import TOOLSET_CHOICES
    except ImportError:
        return {}
    return {"toolset": tuple(TOOLSET_CHOICES)}


def _bash(spec: tuple[list[_Option], list[tuple[str, str]]]) -> str:
    options, commands = spec
    cases = []
    for opt in options:
        if opt.takes_value:
            words = " ".join(opt.values)
            # a free value (a path): let the shell complete file names
            action = (f'COMPREPLY=($(compgen -W "{words}" -- "$cur"))' if opt.values
                      else 'COMPREPLY=($(compgen -f -- "$cur"))')
            if opt.listed:
                action = (f'COMPREPLY=($(compgen -W "$(tether completion --list {opt.listed} '
                          '2>/dev/null)" -- "$cur"))')
            cases.append(f"        {'|'.join(opt.names)}) {action}; return 0 ;;")
    all_options = " ".join(n for o in options for n in o.names)
    names = " ".join(c for c, _ in commands)
    return f"""# bash completion for tether (generated by `tether completion bash`)
_tether() {{
    local cur prev
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    case "$prev" in
{chr(10).join(cases)}
    esac
    if [[ $COMP_CWORD -eq 1 && $cur != -* ]]; then
        COMPREPLY=($(compgen -W "{names}" -- "$cur"))
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "{all_options}" -- "$cur"))
        return 0
    fi
    COMPREPLY=($(compgen -f -- "$cur"))
}}
complete -o filenames -F _tether tether
"""


def _zsh_text(text: str) -> str:
    """Help text inside a single-quoted _arguments spec: brackets and colons would end fields."""
    text = text.replace("\\", "").replace("[", "(").replace("]", ")").replace(":", " ")
    return text.replace("'", "'\\''")


def _zsh(spec: tuple[list[_Option], list[tuple[str, str]]]) -> str:
    options, commands = spec
    lines = []
    for opt in options:
        exclusive = f"({' '.join(opt.names)})" if len(opt.names) > 1 else ""
        names = "{" + ",".join(opt.names) + "}" if len(opt.names) > 1 else opt.names[0]
        value = ""
        if opt.takes_value:
            value = f":value:({' '.join(opt.values)})" if opt.values else ":value:_files"
            if opt.listed:
                # {…} is evaluated when completing (a (…) list is literal words)
                value = (f":{opt.listed[:-1]}:{{compadd -- $(tether completion --list "
                         f"{opt.listed} 2>/dev/null)}}")
        lines.append(f"    '{exclusive}'{names}'[{_zsh_text(opt.help)}]{value}'")
    described = "\n".join(f"        '{c}:{_zsh_text(s)}'" for c, s in commands)
    specs = " \\\n".join(lines)
    return f"""#compdef tether
# zsh completion for tether (generated by `tether completion zsh`)
_tether_commands() {{
    local -a commands
    commands=(
{described}
    )
    _describe -t commands 'tether command' commands
}}
_tether() {{
    _arguments -s \\
{specs} \\
    '1: :_tether_commands' \\
    '*:prompt or file:_files'
}}
_tether "$@"
"""


def _fish_text(text: str) -> str:
    return text.replace("\\", "").replace("'", "\\'")


def _fish(spec: tuple[list[_Option], list[tuple[str, str]]]) -> str:
    options, commands = spec
    lines = ["# fish completion for tether (generated by `tether completion fish`)",
             "complete -c tether -f"]
    for name, summary in commands:
        lines.append(f"complete -c tether -n __fish_use_subcommand -a {name} -d '{_fish_text(summary)}'")
    for opt in options:
        parts = ["complete -c tether"]
        for n in opt.names:
            if n.startswith("--"):
                parts.append(f"-l {n[2:]}")
            else:
                parts.append(f"-s {n[1:]}")
        if opt.listed:
            parts.append(f"-x -a '(tether completion --list {opt.listed} 2>/dev/null)'")
        elif opt.takes_value:
            parts.append(f"-x -a '{' '.join(opt.values)}'" if opt.values else "-r -F")
        parts.append(f"-d '{_fish_text(opt.help)}'")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"
