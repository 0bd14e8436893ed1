"""What a `runtime_start` names (reference §12.3): the agent and conversation (created when
asked), the working directory, and the same session pieces a headless run of that conversation
would get from `cli.runner.prepare`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.backends.local.store import LocalStore
from tether.cli.runner import Prepared, system_text
from tether.errors import UsageError
from tether.runtime.checkpoints import CheckpointStore
from tether.server.protocol_v2 import RuntimeScope, RuntimeStart


@dataclass
class ServerContext:
    """What every runtime of one server shares."""

    store: LocalStore
    checkpoints: CheckpointStore
    env: dict[str, str]
    default_cwd: Path
    owner: str  # this process's checkpoint owner id (fences a crashed predecessor out)
    max_queue: int = 32


@dataclass(frozen=True, slots=True)
class Resolved:
    scope: RuntimeScope
    created_agent: bool
    created_conversation: bool


def resolve_runtime(ctx: ServerContext, start: RuntimeStart) -> Resolved:
    """Which agent and conversation a runtime_start names, creating them when asked."""
    from tether.providers.catalog import default_handle
    from tether.runtime.session import NO_MODEL

    store = ctx.store
    created_agent = created_conversation = False
    if start.agent_id is not None:
        agent = store.get_agent(start.agent_id)
    else:
        body = _body(start.create_agent)
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise UsageError("create_agent.body.model must be a model handle string")
        if model is None and default_handle(store.home, ctx.env) is None:
            raise UsageError(NO_MODEL)
        if model is not None:
            from tether.providers.catalog import resolve_provider

            resolve_provider(model, store.home, ctx.env)  # a bad handle fails before creating
        tags = body.get("tags") or ()
        agent = store.create_agent(
            model=model,
            system=str(body.get("system") or system_text(_flags("standard"))),
            name=str(body.get("name") or "tether"),
            description=str(body.get("description") or ""),
            tags=tuple(str(t) for t in tags) if isinstance(tags, list) else (),
        )
        created_agent = True
    if start.create_conversation is not None:
        conversation_id = store.create_conversation(agent.id).id
        created_conversation = True
    else:
        conversation_id = store.get_conversation(start.conversation_id or "default", agent.id).id
    return Resolved(RuntimeScope(agent.id, conversation_id), created_agent, created_conversation)


def build_prepared(
    ctx: ServerContext, scope: RuntimeScope, cwd: Path, mode: str | None
) -> Prepared:
    """Exactly what a headless run of this conversation in `cwd` would get (`cli.runner.prepare`:
    settings, trust, hooks, sandbox, file guards, subagents, memory, mods), so the server never
    drifts from the CLI. `prepare` reads the process's cwd; the event loop is single-threaded
    and this call does not yield, so switching it for the call is safe."""
    from tether.cli.runner import prepare
    from tether.core.permissions import normalize_mode

    chosen = normalize_mode(mode) if mode is not None else None
    flags = _flags(chosen or "standard")
    flags.permission_mode_given = chosen is not None
    flags.agent = scope.agent_id
    flags.conversation = scope.conversation_id
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        prepared = prepare(flags)
    finally:
        os.chdir(previous)
    # Every runtime checkpoints into the server's one store, under the server's owner id.
    prepared.checkpoint_store = (ctx.checkpoints, ctx.owner)
    prepared.shared_checkpoints = True
    return prepared


def check_cwd(value: str | None, default: Path) -> Path:
    if value is None:
        return default
    path = Path(value)
    if not path.is_absolute():
        raise UsageError(f"cwd must be an absolute path (got {value!r})")
    if not path.is_dir():
        raise UsageError(f"cwd {value!r} is not a directory")
    return path


def _flags(mode: str) -> Any:
    from tether.cli.flags import RunFlags

    return RunFlags(headless=True, prompt=None, permission_mode=mode, permission_mode_given=True)


def _body(spec: Mapping[str, Any] | None) -> Mapping[str, Any]:
    body = (spec or {}).get("body")
    return body if isinstance(body, dict) else {}
