"""What a `runtime_start` names (reference §12.3): the agent and conversation (created when
asked), the working directory, and the same session pieces a headless run of that conversation
would get from `runtime.assembly.prepare`.

A working directory is never inside `$TETHER_HOME` (symlinks resolved): that is where tether
keeps credentials, every conversation and the checkpoints, and a runtime there would make them
its workspace. A scoped client may not pick a folder that contains `$TETHER_HOME` either.
`workspace_sandbox` is enforced (every shell command of the conversation runs in the workspace
sandbox, as with `TETHER_FS_SANDBOX=1`) or refused when no kernel backend works here; a scoped
client's conversations always run sandboxed (it answers its own approvals, so the kernel is
the boundary). A sandboxed server conversation's shell sees nothing of `$TETHER_HOME` but its
own scratch directory."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tether.backends.local.store import LocalStore
from tether.backends.store_api import ConversationStore
from tether.errors import UsageError
from tether.runtime.session.assembly import system_text
from tether.runtime.session.prepared import Prepared
from tether.runtime.turns.checkpoints import CheckpointStore
from tether.server.protocol_v2 import RuntimeScope, RuntimeStart

if TYPE_CHECKING:
    from tether.runtime.turns.input_queue import InputQueue
    from tether.server.auth import Grant
    from tether.server.durable_inputs import GroupCommit
    from tether.server.idle_release import Kept
    from tether.server.runtime import ConversationRuntime


@dataclass
class ServerContext:
    """What every runtime of one server shares."""

    store: ConversationStore  # open_store's: TETHER_HOME's files, or the PostgreSQL store's rows
    checkpoints: CheckpointStore
    env: dict[str, str]
    default_cwd: Path
    owner: str  # this process's checkpoint owner id (fences a crashed predecessor out)
    max_queue: int = 32
    # Seconds an idle runtime (no subscriber, nothing running or waiting) is kept before it is
    # released and later rebuilt from disk; None: never released (issue 22 item 5).
    idle_release_after: float | None = 60.0
    released: OrderedDict[RuntimeScope, Kept] = field(default_factory=OrderedDict)  # idle_release
    # Where acknowledged inputs are kept until they ran (server/durable_inputs.py); None: in
    # memory only.
    inputs: InputQueue | None = None
    input_writer: GroupCommit | None = None  # its group commit, made on the first input
    # With `--store postgresql://…`: this worker's conversation leases (server/fleet_leases.py);
    # an input of a conversation another worker holds is only recorded here.
    fleet: Any = None


def open_store(home: Path, fleet: Any = None) -> ConversationStore:
    """The one place the server picks where agents, conversations and transcripts live: the
    files under `home`, or with `--store postgresql://…` (a `FleetLeases`, `fleet`) the rows of
    the store, on the worker's own session, each transcript append fenced by the lease this
    worker holds on the conversation. A write outside a turn (a compaction asked for by a
    client) on the event loop takes the lease when it is free, as a first input would; held by
    another live worker, or asked from a worker thread without it, the write is refused. The
    runtime and the backend only ever call the interface (`backends/store_api.py`)."""
    if fleet is None:
        return LocalStore(home)
    import asyncio

    from tether.backends.postgres.agents import PgConversationStore

    def lease_of(conversation: str) -> Any:
        lease = fleet.held.get(conversation)
        if lease is not None:
            return lease
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None  # a worker thread cannot take a lease (its keeper needs the loop)
        return fleet.held.get(conversation) if fleet.holds(conversation) else None

    return PgConversationStore(fleet.leases.session, home, lease_of)


@dataclass(frozen=True, slots=True)
class Resolved:
    scope: RuntimeScope
    created_agent: bool
    created_conversation: bool


def start_runtime(
    ctx: ServerContext,
    runtimes: dict[RuntimeScope, ConversationRuntime],
    instance: str,
    grant: Grant,
    frame: RuntimeStart,
) -> tuple[ConversationRuntime, Resolved]:
    """The runtime a `runtime_start` names, started (into `runtimes`) or joined. Every check
    that can refuse runs before anything is looked up or created: the grant (ids, then mode),
    the working directory, the folder's settings for a scoped client, the sandbox request."""
    from tether.server.idle_release import register_runtime
    from tether.server.runtime import ConversationRuntime
    from tether.server.v2_frames import EventStream

    refusal = grant.refusal(
        frame.agent_id,
        frame.conversation_id if frame.conversation_id != "default" else None,
        create_agent=frame.create_agent is not None,
        create_conversation=frame.create_conversation is not None,
    )
    if refusal is not None:  # before any lookup: the answer reveals nothing
        raise UsageError(refusal)
    home = ctx.store.home
    cwd = check_workspace(frame.cwd, ctx.default_cwd, home, scoped=grant.scoped)
    if frame.sandbox_root is not None and Path(frame.sandbox_root).resolve() != cwd:
        raise UsageError(
            f"workspace_sandbox.root {frame.sandbox_root!r} must be the runtime's cwd ({cwd}): "
            "this server sandboxes the working directory in place"
        )
    if grant.scoped:
        check_scoped_folder(home, cwd)
    mode = effective_mode(home, cwd, frame.mode)
    refusal = grant.mode_refusal(mode)
    if refusal is not None:
        raise UsageError(refusal if frame.mode else f"{refusal}; the settings for {cwd} ask for it")
    # A scoped client answers its own approvals: only the kernel bounds what it runs.
    sandboxed = frame.workspace_sandbox or grant.scoped
    if sandboxed and (why := sandbox_available()) is not None:
        if frame.workspace_sandbox:
            raise UsageError(f"workspace_sandbox cannot be enforced on this server: {why}")
        raise UsageError(
            "this connection's token is scoped, so its conversations run in the workspace "
            f"sandbox, which cannot be enforced on this server: {why}"
        )
    resolved = resolve_runtime(ctx, frame)
    refusal = grant.refusal(resolved.scope.agent_id, resolved.scope.conversation_id)
    if refusal is not None:  # `default` named a conversation the token does not hold
        raise UsageError(refusal)
    rt = runtimes.get(resolved.scope)
    if rt is None:
        kept = ctx.released.get(resolved.scope)
        if kept is not None:  # released while idle: rebuilt where and how it last ran
            cwd, mode_given, sandboxed = _as_kept(kept, frame, grant, home, cwd, sandboxed)
        else:
            mode_given = frame.mode
        prepared = build_prepared(
            ctx, resolved.scope, cwd, mode_given, workspace_sandbox=sandboxed
        )
        rt = ConversationRuntime(ctx, prepared, EventStream(resolved.scope, instance))
        register_runtime(ctx, runtimes, rt)
        _arrange_replay(ctx, rt, frame)
        return rt, resolved
    # Another client started it: it must already be what this one asks for and may use.
    running = rt.p.flags.permission_mode
    refusal = grant.mode_refusal(running)
    if refusal is not None:
        raise UsageError(f"{refusal}: this conversation's runtime runs in it")
    if frame.cwd is not None and cwd != rt.p.cwd:
        raise UsageError(
            f"this conversation's runtime already runs in {rt.p.cwd}; move it with "
            "change_device_state{cwd} instead of a second runtime_start"
        )
    if grant.scoped:  # the folder it really runs in, which another client chose
        check_workspace(str(rt.p.cwd), rt.p.cwd, home, scoped=True)
        check_scoped_folder(home, rt.p.cwd)
    if frame.mode is not None and mode != running:
        raise UsageError(
            f"this conversation's runtime already runs in mode {running}; change it with "
            "change_device_state{mode}"
        )
    if sandboxed and not rt.sandboxed:
        why = "" if frame.workspace_sandbox else " (a scoped token's conversations need it)"
        raise UsageError(
            f"this conversation's runtime already runs without the workspace sandbox{why}; "
            "it cannot be added to a running runtime"
        )
    _arrange_replay(ctx, rt, frame)
    return rt, resolved


def _arrange_replay(ctx: ServerContext, rt: ConversationRuntime, frame: RuntimeStart) -> None:
    """`after_event_seq`: the frames after it go to this client first (`event_replay.py`)."""
    if frame.after_event_seq is not None:
        from tether.server.event_replay import arrange_replay

        arrange_replay(ctx, rt, frame.after_event_seq)


def resolve_runtime(ctx: ServerContext, start: RuntimeStart) -> Resolved:
    """Which agent and conversation a runtime_start names, creating them when asked."""
    from tether.providers.catalog import default_handle
    from tether.runtime.session.session import NO_MODEL

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
    ctx: ServerContext,
    scope: RuntimeScope,
    cwd: Path,
    mode: str | None,
    *,
    workspace_sandbox: bool = False,
) -> Prepared:
    """Exactly what a headless run of this conversation in `cwd` would get (the same
    `runtime.assembly.prepare`: settings, trust, hooks, sandbox, file guards, subagents, memory,
    mods), so the server never drifts from the CLI; the folder and environment are passed in,
    never switched for the process. With `workspace_sandbox`, the run sees
    `TETHER_FS_SANDBOX=1` (and keeps it in its environment, so its subagents are sandboxed
    too). The assembly's warnings go to the server's stderr."""
    from tether.core.permissions import normalize_mode
    from tether.runtime.manage import toolset_ops
    from tether.runtime.policy.sandboxing import FS_SANDBOX_ENV
    from tether.runtime.session.assembly import RunSpec, prepare

    chosen = normalize_mode(mode) if mode is not None else None
    flags = _flags(chosen or "standard")
    flags.permission_mode_given = chosen is not None
    flags.agent = scope.agent_id
    flags.conversation = scope.conversation_id
    flags.toolset = toolset_ops.preference(ctx.store.get_agent(scope.agent_id),
                                           scope.conversation_id)  # update_toolset's
    env = dict(ctx.env)
    if workspace_sandbox:
        env[FS_SANDBOX_ENV] = "1"
    spec = RunSpec(cwd=cwd, env=env, home=Path(env.get("HOME") or Path.home()), store=ctx.store)
    try:
        prepared = prepare(flags, spec)
    finally:
        for message in spec.warnings:
            print(f"tether: {message}", file=sys.stderr)
    # Every runtime checkpoints into the server's one store, under the server's owner id.
    prepared.checkpoint_store = (ctx.checkpoints, ctx.owner)
    prepared.shared_checkpoints = True
    _guard_state(prepared, ctx.store.home)
    if workspace_sandbox and prepared.services.sandbox is None:  # cannot happen; be sure
        raise UsageError("workspace_sandbox was asked for but the run has no shell sandbox")
    _hide_state_from_shell(prepared, ctx.store.home)
    return prepared


def folder_trusted(ctx: ServerContext, cwd: Path) -> bool:
    from tether.runtime.policy.trust import TrustStore

    return TrustStore(ctx.store.home).state(cwd) == "trusted"


def carry_external_tools(old: Prepared, new: Prepared) -> None:
    """Tools a client registered (server/external_tools.py) belong to the runtime, not to
    its folder: a rebuilt runtime keeps them."""
    for tool in old.registry.tools().values():
        if getattr(tool, "external", False) and new.registry.get(tool.name) is None:
            new.registry.register(tool)


def rebuild_if_untrusted(rt: ConversationRuntime) -> None:
    """Trust binds to what runs, also in a long-lived runtime: if the files its folder was
    trusted for (settings, hook scripts, mods, skills) changed since it was built, build it
    again before the next turn, so the project's settings, hooks and mods stop applying."""
    import asyncio

    from tether.server.v2_frames import error_frame

    if not rt._built_trusted or folder_trusted(rt.ctx, rt.p.cwd):
        return
    old = rt.p
    given = old.flags.permission_mode if old.flags.permission_mode_given else None
    rt.p = build_prepared(rt.ctx, rt.scope, old.cwd, given, workspace_sandbox=rt.sandboxed)
    rt._built_trusted = False
    carry_external_tools(old, rt.p)
    asyncio.ensure_future(old.shutdown())
    rt.broadcast(error_frame(
        f"{old.cwd} changed since it was trusted (run `tether trust --status` there to see "
        "which file); its project settings, hooks and mods no longer apply to this runtime"
    ))
    rt.broadcast(rt.device_status_frame())


def _as_kept(
    kept: Kept, frame: RuntimeStart, grant: Grant, home: Path, cwd: Path, sandboxed: bool
) -> tuple[Path, str | None, bool]:
    """The folder, mode and sandbox a rebuilt runtime starts with: what the released one had,
    unless this start names others; held to this client's grant like any start."""
    if frame.cwd is None:
        cwd = check_workspace(str(kept.cwd), kept.cwd, home, scoped=grant.scoped)
        if grant.scoped:
            check_scoped_folder(home, cwd)
    mode = frame.mode if frame.mode is not None else kept.mode
    refusal = grant.mode_refusal(mode)
    if refusal is not None:
        raise UsageError(f"{refusal}: this conversation's runtime runs in it")
    return cwd, mode, sandboxed or kept.sandboxed


def _hide_state_from_shell(prepared: Prepared, home: Path) -> None:
    """A sandboxed server conversation's shell sees none of `$TETHER_HOME` (other
    conversations, credentials, checkpoints, agents) but its own scratch directory, which the
    sandbox binds back writable on top (deeper mounts are applied later)."""
    from dataclasses import replace

    sandbox = prepared.services.sandbox
    if sandbox is None:
        return
    from tether.sandbox.policy import check_layout

    policy = sandbox.policy
    hidden = tuple(dict.fromkeys((*policy.denied_roots, home.absolute(), home.resolve())))
    policy = replace(policy, denied_roots=hidden)
    check_layout(policy)
    prepared.services.sandbox = replace(cast(Any, sandbox), policy=policy)  # a ShellSandbox


def _guard_state(prepared: Prepared, home: Path) -> None:
    """Hold the file guard to all of tether's state, not only `agents/` (`Guards.state_root`,
    issue 14), with the conversation's own scratch directory left reachable, where the run's
    bootstrap did not already set it."""
    from dataclasses import fields, replace

    policy = prepared.policy
    if policy is None or policy.guards is None:
        return
    names = {f.name for f in fields(policy.guards)}
    if "state_root" not in names or getattr(policy.guards, "state_root", None) is not None:
        return
    changes: dict[str, object] = {"state_root": home.resolve()}
    if "own_state_dirs" in names and not getattr(policy.guards, "own_state_dirs", ()):
        changes["own_state_dirs"] = (prepared.scratch.resolve(),)
    policy.guards = replace(policy.guards, **changes)  # type: ignore[arg-type]


def check_cwd(value: str | None, default: Path) -> Path:
    if value is None:
        return default
    if "\0" in value:
        raise UsageError("cwd must not contain a NUL byte")
    path = Path(value)
    if not path.is_absolute():
        raise UsageError(f"cwd must be an absolute path (got {value!r})")
    if not path.is_dir():
        raise UsageError(f"cwd {value!r} is not a directory")
    return path


def check_workspace(
    value: str | None, default: Path, home: Path, *, scoped: bool = False
) -> Path:
    """The runtime's working directory, resolved (symlinks included, so a link cannot smuggle
    tether's state in): never inside `$TETHER_HOME`, and for a `scoped` client never a folder
    that holds it. The resolved path is what the runtime uses, so what was checked is what runs."""
    path = check_cwd(value, default)
    try:
        real = path.resolve(strict=True)
    except OSError as exc:
        raise UsageError(f"cwd {str(path)!r}: {exc.strerror or exc}") from None
    state = home.resolve()
    if real == state or real.is_relative_to(state):
        raise UsageError(
            f"cwd {str(path)!r} is inside TETHER_HOME ({state}), where tether keeps credentials, "
            "conversations and checkpoints; start the runtime in a project folder"
        )
    if scoped and state.is_relative_to(real):
        raise UsageError(
            f"cwd {str(path)!r} contains TETHER_HOME ({state}); this connection's token is "
            "scoped, so its workspace may not hold tether's own state: use a project folder"
        )
    return real


def sandbox_available() -> str | None:
    """None when the workspace sandbox can be enforced here, else why not."""
    import sys

    if not sys.platform.startswith(("linux", "darwin")):
        return f"no sandbox backend for {sys.platform}"
    try:
        from tether.sandbox import probe

        status = probe()
    except Exception as exc:  # a probe that breaks means "cannot enforce", not a dead server
        return f"the sandbox probe failed ({type(exc).__name__}: {exc})"
    if status.backend is None:
        return "; ".join(status.reasons) or "no sandbox backend works on this machine"
    return None


def check_scoped_folder(home: Path, cwd: Path) -> None:
    """A scoped client gets no loosening from a trusted folder's project settings (allow rules,
    additional directories, hooks, sandbox network / Unix sockets / kept variables, mods):
    it picks the folder, so the folder's owner did not choose them for it. Hooks matter most:
    they run unsandboxed, and a script a hook runs may be one the sandboxed shell can edit.
    (A project `defaultMode` is judged by the token's modes, `effective_mode`.)"""
    from tether.runtime.session.settings import load_settings

    as_untrusted = load_settings(home, cwd, "untrusted")
    if not as_untrusted.ignored or load_settings(home, cwd).trust != "trusted":
        return  # nothing loosens, or the folder is not trusted and nothing applies anyway
    found = []
    for line in as_untrusted.ignored:
        what, _, where = line.removeprefix("ignoring ").partition(" from ")
        items = [w for w in what.split(", ") if not w.startswith("permissions.mode")]
        if items:
            found.append(f"{', '.join(items)} in {where.split(': ', 1)[0]}")
    if found:
        raise UsageError(
            f"the trusted project settings of {cwd} loosen permissions ({'; '.join(found)}); "
            "this connection's token is scoped, so its conversations may not use them: start "
            "it in a folder without them"
        )


def effective_mode(home: Path, cwd: Path, mode: str | None) -> str:
    """The permission mode a runtime in `cwd` would run in: the one asked for, else the
    settings' `defaultMode` (a trusted project may set it), else `standard`."""
    from tether.core.permissions import normalize_mode
    from tether.runtime.session.settings import load_settings

    if mode is not None:
        return normalize_mode(mode)
    return load_settings(home, cwd).permissions.mode or "standard"


def _flags(mode: str) -> Any:
    from tether.runtime.session.flags import RunFlags

    return RunFlags(headless=True, prompt=None, permission_mode=mode, permission_mode_given=True)


def _body(spec: Mapping[str, Any] | None) -> Mapping[str, Any]:
    body = (spec or {}).get("body")
    return body if isinstance(body, dict) else {}
