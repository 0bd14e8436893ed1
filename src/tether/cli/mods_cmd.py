"""`tether mods …` and `tether hooks list`: what extends this folder's sessions, and from where.

    tether mods list [--json] [--agent ID]   every discovered mod: source, status, location; a
                                             mod that failed to load shows `failed` and why
    tether mods disable NAME                 keep NAME from loading (in $TETHER_HOME/mods/state.json)
    tether mods enable NAME                  undo a disable
    tether mods remove NAME --yes            delete the mod's file or package directory
    tether hooks list [--json]               every configured hook, its settings file, whether it applies
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def run_mods_command(command: str, argv: Sequence[str]) -> int:
    try:
        if command == "hooks":
            return _hooks(argv)
        return _mods(argv)
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


# --- mods ----------------------------------------------------------------------------------


def _mods(argv: Sequence[str]) -> int:
    parser = _Parser(prog="tether mods", description="list, enable, disable or remove mods")
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--agent", help="include this agent's memory mods")
    for action in ("enable", "disable", "remove"):
        p = sub.add_parser(action)
        p.add_argument("name")
        if action == "remove":
            p.add_argument("--yes", action="store_true", help="really delete it")
    ns = parser.parse_args(list(argv))
    home, cwd = _home(), Path.cwd()
    rows = mod_rows(home, cwd, os.environ, agent_id=getattr(ns, "agent", None))
    if ns.action == "list":
        if ns.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print("no mods found (put *.py files or packages in $TETHER_HOME/mods)")
        else:
            for r in rows:
                why = f" (shadowed by {r['shadowed_by']})" if r.get("shadowed_by") else ""
                why = f" ({r['error']})" if r.get("error") else why
                print(f"{r['name']}\t{r['source']}\t{r['status']}{why}\t{r['location']}")
        return 0
    from tether.runtime.extensions.mods.engine import read_disabled, write_disabled

    name = ns.name
    known = [r for r in rows if r["name"] == name]
    disabled = read_disabled(home)
    if ns.action == "disable":
        if not known:
            raise UsageError(f"no mod named {name!r} (see `tether mods list`)")
        write_disabled(home, [*disabled, name])
        print(f"disabled: {name}")
        return 0
    if ns.action == "enable":
        if name not in disabled:
            if not known:
                raise UsageError(f"no mod named {name!r} (see `tether mods list`)")
            print(f"already enabled: {name}")
            return 0
        write_disabled(home, [n for n in disabled if n != name])
        print(f"enabled: {name}")
        return 0
    target = next((r for r in known if r["status"] != "shadowed"), known[0] if known else None)
    if target is None:
        raise UsageError(f"no mod named {name!r} (see `tether mods list`)")
    if target["path"] is None:
        raise UsageError(f"{name} comes from {target['location']}; uninstall its package instead")
    path = Path(target["path"])
    if not ns.yes:
        sys.stderr.write(f"would delete {path}; pass --yes to delete it\n")
        return 1
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    if name in disabled:
        write_disabled(home, [n for n in disabled if n != name])
    print(f"removed: {path}")
    return 0


def mod_rows(home: Path, cwd: Path, env: Any, *, agent_id: str | None) -> list[dict[str, Any]]:
    """Every mod any source offers, with what a session here would do with it."""
    from tether.runtime.extensions.mods.engine import candidates, mods_disabled, read_disabled
    from tether.runtime.extensions.mods.load_record import failure_of, read_failures

    trusted = _folder_trusted(home, cwd)
    found, _ = candidates(home, cwd, env, agent_id=agent_id, project_trusted=True)
    winners: dict[str, Any] = {}
    for spec in found:
        if not (spec.source == "project" and not trusted):
            held = winners.get(spec.name)
            if held is None or spec.priority >= held.priority:
                winners[spec.name] = spec
    off = set(read_disabled(home))
    globally_off = mods_disabled(env)
    failures = read_failures(home)  # what the last session's load said
    rows: list[dict[str, Any]] = []
    for spec in sorted(found, key=lambda s: (s.name, -s.priority)):
        winner = winners.get(spec.name)
        if spec.source == "project" and not trusted:
            status = "untrusted"
        elif winner is not spec:
            status = "shadowed"
        elif spec.name in off:
            status = "disabled"
        else:
            status = "off (TETHER_DISABLE_MODS)" if globally_off else "enabled"
        error = failure_of(spec, failures) if status == "enabled" else None
        row: dict[str, Any] = {
            "name": spec.name, "source": spec.source, "status": "failed" if error else status,
            "location": spec.location, "path": str(spec.path) if spec.path is not None else None,
        }
        if error:
            row["error"] = error
        if status == "shadowed" and winner is not None:
            row["shadowed_by"] = winner.source
        rows.append(row)
    return rows


def _folder_trusted(home: Path, cwd: Path) -> bool:
    from tether.runtime.policy.trust import TrustStore

    return TrustStore(home).state(cwd) == "trusted"


# --- hooks ---------------------------------------------------------------------------------


def _hooks(argv: Sequence[str]) -> int:
    parser = _Parser(prog="tether hooks", description="list the configured hooks")
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("--json", action="store_true")
    ns = parser.parse_args(list(argv))
    rows = hook_rows(_home(), Path.cwd())
    if ns.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no hooks configured")
    else:
        for r in rows:
            what = r["command"] if r["type"] == "command" else f"prompt: {r['prompt']}"
            print(f"{r['event']}\t{r['matcher']}\t{what}\t{r['source']}\t{r['applies']}")
    return 0


def hook_rows(home: Path, cwd: Path) -> list[dict[str, Any]]:
    from tether.runtime.extensions.hooks import HookPrompt, merge_hooks, parse_hooks
    from tether.runtime.session.settings import load_settings

    settings = load_settings(home, cwd)
    trusted = settings.trust == "trusted"
    merged = merge_hooks(settings.hooks_user, list(settings.hooks_project))
    rows: list[dict[str, Any]] = []
    for f in settings.files:
        events, _ = parse_hooks(f.data.get("hooks"), str(f.path))
        if f.scope != "user" and not trusted:
            applies = "no (folder not trusted: run `tether trust`)"
        elif merged.disabled:
            applies = "no (hooks disabled)"
        else:
            applies = "yes"
        for event, groups in events.items():
            for group in groups:
                for hook in group.hooks:
                    row: dict[str, Any] = {
                        "event": event, "matcher": group.matcher or "*",
                        "type": "prompt" if isinstance(hook, HookPrompt) else "command",
                        "timeout": hook.timeout_s, "source": str(f.path), "scope": f.scope,
                        "applies": applies,
                    }
                    if isinstance(hook, HookPrompt):
                        row.update(prompt=hook.prompt, model=hook.model)
                    else:
                        row["command"] = hook.command
                    rows.append(row)
    return rows


def _home() -> Path:
    from tether.runtime.session.session import tether_home

    return tether_home(os.environ)
