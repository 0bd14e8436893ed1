"""The CLI's side of assembling a run: the process's working directory, environment and home as
the `RunSpec`, the assembly's warnings on stderr, the prompt from `-p` or stdin.

The session itself is assembled in `runtime/session/assembly.py` (`Prepared` in `runtime/session/prepared.py`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tether.cli.flags import RunFlags
from tether.errors import TetherError
from tether.runtime.session.prepared import Prepared

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore
    from tether.runtime.session.assembly import RunSpec

__all__ = ["apply_continue", "prepare", "process_spec", "read_prompt"]


def process_spec() -> RunSpec:
    """This process's working directory, environment and home: what a command-line run is in."""
    from tether.runtime.session.assembly import RunSpec

    env = dict(os.environ)
    return RunSpec(cwd=Path.cwd(), env=env, home=Path(env.get("HOME") or Path.home()))


def prepare(flags: RunFlags, store: ConversationStore | None = None) -> Prepared:
    """Assemble the run in this process's folder and environment (on `store`, `tether -p
    --store`'s; None: TETHER_HOME's); the assembly's warnings go to stderr (also when it fails:
    they may say why)."""
    from tether.runtime.session import gc_policy
    from tether.runtime.session.assembly import prepare as assemble

    spec = process_spec()
    if store is not None:
        spec.store = store
    try:
        prepared = assemble(flags, spec)
    finally:
        print_warnings(spec.warnings)
    if prepared.flags.permission_mode == "plan":  # reads only, until ExitPlanMode is approved
        from tether.runtime.turns.plan_mode import enter_plan_mode

        enter_plan_mode(prepared)
    gc_policy.startup_done()
    return prepared


def apply_continue(flags: RunFlags) -> None:
    """`-c/--continue`: point the flags at the most recent conversation of this folder that has
    messages (an opened-and-left one is skipped); none is a `UsageError` saying so. Folders
    last used before conversations were remembered per folder fall back to their last agent's
    most recently written conversation."""
    from tether.backends.local.store import LocalStore
    from tether.errors import UsageError
    from tether.runtime.session.session import _read_state, recent_conversations, tether_home

    store = LocalStore(tether_home(os.environ))
    cwd = Path.cwd()
    candidates = recent_conversations(store, cwd)
    if not candidates:
        projects = _read_state(store).get("projects")
        agent_id = projects.get(str(cwd)) if isinstance(projects, dict) else None
        if isinstance(agent_id, str):
            written = [(_mtime(store.conversation_dir(agent_id, c.id) / "messages.jsonl"), c.id)
                       for c in store.list_conversations(agent_id)]
            candidates = [(agent_id, c) for _m, c in sorted(written, reverse=True)]
    for agent_id, conversation_id in candidates:
        if not _has_messages(store.conversation_dir(agent_id, conversation_id) / "messages.jsonl"):
            continue
        if conversation_id == "default":
            flags.agent, flags.conversation = agent_id, "default"
        else:
            flags.conversation = conversation_id
        return
    raise UsageError(f"-c/--continue: no conversation to continue in {cwd}; start one with "
                     '`tether -p "…"` or `tether`')


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _has_messages(transcript: Path) -> bool:
    """A line after the session header (read no further: transcripts can be long)."""
    try:
        with transcript.open("rb") as f:
            f.readline()
            return bool(f.readline().strip())
    except OSError:
        return False


def print_warnings(warnings: list[str]) -> None:
    for message in warnings:
        print(f"tether: {message}", file=sys.stderr)


def read_prompt(flags: RunFlags) -> str:
    if flags.prompt is not None:
        return flags.prompt
    if sys.stdin is None or sys.stdin.isatty():
        raise TetherError('no prompt given: pass it after -p (`tether -p "…"`) or pipe it on stdin')
    text = sys.stdin.read().strip()
    if not text:
        raise TetherError(
            'no terminal and the prompt on stdin was empty: use `tether -p "…"` or pipe a prompt '
            'on stdin (`echo "…" | tether`)'
        )
    return text
