"""What every headless run shares: the resolved session, backend, tools and permission policy.

`prepare(flags)` does all the bootstrap that can fail with a user error (prompt, session, model,
provider); one-shot (`headless.py`) and bidirectional (`bidirectional.py`) runs then drive turns.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.backends.local.backend import LocalBackend
from tether.backends.local.compaction import CompactionSettings
from tether.backends.local.store import LocalStore
from tether.cli.flags import RunFlags
from tether.core.permissions import Call, Decision, Guards, Policy, RuleSet, Scope, decide
from tether.core.permissions.rules import Rule, canonical_tool_name, cli_allow_rule, parse_rule
from tether.core.prompt import DEFAULT_SYSTEM
from tether.core.tools import Tool, ToolContext, ToolContextStore, ToolRegistry, ToolRunContext
from tether.core.turn import Approver, Event, TurnDeps
from tether.errors import TetherError, UsageError
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.turns import ApprovalResult, ConversationRef, LocalToolReturn
from tether.runtime.session import Session, resolve_session, tether_home
from tether.runtime.settings import Settings, load_settings

if TYPE_CHECKING:
    from tether.runtime.checkpoints import CheckpointStore, RecoveredEffect
    from tether.runtime.hooks import HookRunner


class PermissionPolicy:
    """The session's rules and workspace, as the `decide` the turn engine calls for each call.

    The mode comes from the tool-context snapshot (it can change between turns); session allow
    rules (added when a client answers "always allow") live here, in memory."""

    def __init__(self, rules: RuleSet, scope: Scope, guards: Guards | None = None) -> None:
        self.rules = rules
        self.scope = scope
        self.guards = guards or Guards()
        # Whether this run can confine what the read-only auto-allow admits (asked on the first
        # shell call only); None: the run has no confinement, so such commands ask.
        self.confinable: Callable[[], bool] | None = None

    def read_denied(self) -> Callable[[Path], bool] | None:
        """For recursive readers (Grep): whether a file deny rule protects `path`; None when no
        file deny rule exists, so searches pay nothing."""
        denies = [r for r in self.rules.denies if r.kind == "path"]
        if not denies:
            return None
        only_denies = RuleSet(deny=tuple(denies))

        def denied(path: Path) -> bool:
            call = Call("Read", paths=(str(path),))
            return decide(call, Policy("unrestricted", only_denies, self.scope)).verdict == "deny"

        return denied

    def add_session_allow(self, rule: Rule) -> None:
        self.rules = self.rules.with_session_allow(rule)

    def __call__(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Decision:
        key = "cmd" if tool.name == "exec_command" else "command"  # Codex's shell names it cmd
        command = args.get(key) if canonical_tool_name(tool.name) == "Bash" else None
        call = Call(
            tool.name,
            args,
            paths=tuple(str(p) for p in tool.paths(args, ctx.cwd)),
            command=command if isinstance(command, str) else None,
            cwd=ctx.cwd,
            external=bool(getattr(tool, "external", False)),
            read_only_hint=bool(getattr(tool, "read_only_auto", False)),
        )
        can_confine = (  # probed only where the read-only auto-allow could apply
            call.command is not None and ctx.permission_mode in ("standard", "acceptEdits")
            and self.confinable is not None and self.confinable()
        )
        return decide(call, Policy(ctx.permission_mode, self.rules, self.scope, self.guards,
                                   can_confine=can_confine))


def build_policy(flags: RunFlags, settings: Settings, cwd: Path, home: Path) -> PermissionPolicy:
    perms = settings.permissions
    rules = RuleSet(
        deny=perms.deny,
        cli_deny=tuple(parse_rule(t) for t in flags.disallowed_tools),
        always_ask=perms.always_ask,
        cli_allow=tuple(cli_allow_rule(t) for t in flags.allowed_tools),
        allow=perms.allow,
        ask=perms.ask,
    )
    return PermissionPolicy(rules, Scope.of(cwd, home, perms.additional_directories))


def file_guards(
    home: Path, agent_id: str, env: Mapping[str, str], writable: Any = None,
    scratch: Path | None = None,
) -> Guards:
    """Step 0 of every check: tether's own state (`home`: provider keys, other conversations,
    checkpoints, ledgers) is off limits to file tools and shell path words, except this agent's
    (and its parent's) memory tree and this conversation's `scratch` dir (overflow files,
    background logs); with the shell sandbox on, file writes keep to its writable roots."""
    from tether.backends.local.store import b64url

    agents = (home / "agents").resolve()
    ids = [agent_id, *([env["TETHER_PARENT_AGENT_ID"]] if env.get("TETHER_PARENT_AGENT_ID") else [])]
    own = tuple(agents / name for i in ids for name in (i, b64url(i)))
    roots = tuple(Path(r).resolve() for r in writable) if writable is not None else None
    # the global skills folder: a skill's SKILL.md points the model at its files there
    own_state = (*((scratch.resolve(),) if scratch is not None else ()), (home / "skills").resolve())
    return Guards(writable_roots=roots, agents_root=agents, own_agent_dirs=own,
                  state_root=home.resolve(), own_state_dirs=own_state)


# Context windows tether assumes when neither TETHER_CONTEXT_WINDOW nor the agent's
# model_settings.context_window_limit says: the providers' common sizes, and a small local one.
DEFAULT_WINDOWS = {"anthropic": 200_000, "openai": 400_000, "openai-chat": 128_000}
LOCAL_WINDOW = 32_768


def context_window(env: Mapping[str, str], model_settings: Mapping[str, Any], provider: str) -> int:
    raw = env.get("TETHER_CONTEXT_WINDOW")
    where = "TETHER_CONTEXT_WINDOW"
    if raw is None and model_settings.get("context_window_limit") is not None:
        raw, where = str(model_settings["context_window_limit"]), "model_settings.context_window_limit"
    if raw is None:
        from tether.providers.catalog import preset_window

        return DEFAULT_WINDOWS.get(provider) or preset_window(provider) or LOCAL_WINDOW
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{where} must be a number of tokens, not {raw!r}") from None
    if value < 1024:
        raise UsageError(f"{where} must be at least 1024 tokens, not {value}")
    return value


class _CompactionEvents:
    """PreCompact hooks, then mods' compact_start; compact_end after (reference §9, §10)."""

    def __init__(self, hooks: HookRunner | None, mods: Callable[[], Any]) -> None:
        self.hooks = hooks
        self.mods = mods

    async def start(self, trigger: str, context_tokens: int, window: int, messages: int) -> None:
        if self.hooks is not None:
            await self.hooks.pre_compact(
                trigger=trigger, context_length=context_tokens, max_context_length=window
            )
        mods = self.mods()
        if mods is not None:
            await mods.compact_start(trigger, {"messages": messages, "context_tokens": context_tokens})

    async def end(self, trigger: str, stats: Mapping[str, Any]) -> None:
        mods = self.mods()
        if mods is not None:
            counts = {k: v for k, v in stats.items() if isinstance(v, int)}
            await mods.compact_end(trigger, counts)


def build_registry(flags: RunFlags | None = None, model: str | None = None) -> ToolRegistry:
    """The run's toolset (`--toolset`, picked per model with `auto`); AskUserQuestion only where
    someone can answer it: the TUI or a bidirectional SDK client."""
    from tether.tools.builtin import register_builtin_tools

    registry = ToolRegistry()
    if flags is None:
        register_builtin_tools(registry)
        return registry
    ask_user = not flags.headless or flags.input_format == "stream-json"
    base = flags.base_tools
    if base is None and flags.tools is not None:
        # `--tools` names the tools to offer (a subagent type's list): built-ins by that name
        # whatever the toolset, so a child of an OpenAI-model parent still gets Bash/Read/Edit
        from tether.tools.toolsets import known_tool_names

        base = [t for t in flags.tools if t in known_tool_names()]
    register_builtin_tools(registry, flags.toolset, model=model, base_tools=base,
                           ask_user=ask_user)
    return registry


def system_text(flags: RunFlags) -> str:
    if flags.system_custom is not None:
        base = flags.system_custom
    elif flags.system_preset == "blank":
        base = "You are a helpful assistant with tools."
    else:
        base = DEFAULT_SYSTEM
    if flags.system_append:
        base = f"{base}\n\n{flags.system_append}"
    return base


@dataclass
class Prepared:
    flags: RunFlags
    env: dict[str, str]
    cwd: Path
    store: LocalStore
    session: Session
    backend: Any  # LocalBackend, or backends.api.backend.ApiBackend for a cloud run
    registry: ToolRegistry
    hooks: HookRunner | None = None
    policy: PermissionPolicy | None = None
    settings: Settings = field(default_factory=Settings)
    contexts: ToolContextStore = field(default_factory=ToolContextStore)
    services: dict[str, Any] = field(default_factory=dict)
    mods: Any = None  # runtime.mods.ModSession, None when mods are off
    checkpoint_store: tuple[CheckpointStore, str] | None = None
    shared_checkpoints: bool = False  # the store belongs to someone else (the App Server)

    @property
    def conversation(self) -> ConversationRef:
        return ConversationRef(self.session.agent.id, self.session.conversation_id)

    @property
    def scratch(self) -> Path:
        value = self.env.get("TETHER_SCRATCHPAD")
        return Path(value) if value else self.store.home / "tmp" / self.session.conversation_id

    async def start_tool_sources(self) -> list[dict[str, Any]]:
        """Start the run's MCP servers and wait (each within its start timeout) until they are
        connected or failed; their status, for the init event. Nothing when none is configured."""
        mcp = self.services.get("mcp")
        if mcp is None:
            return []
        await mcp.ready()
        return mcp.status()

    def add_session_rule(self, text: str) -> None:
        """An "always allow" answer: the rule holds for the rest of this process."""
        if self.policy is None:
            self.policy = build_policy(self.flags, self.settings, self.cwd, Path.home())
        self.policy.add_session_allow(parse_rule(text))

    def make_run_context(self, tool_call_id: str) -> ToolRunContext:
        return ToolRunContext(
            cwd=self.cwd,
            tool_call_id=tool_call_id,
            scratch_dir=self.scratch,
            services=self.services,
            env={
                "TETHER_AGENT_ID": self.session.agent.id,
                "TETHER_CONVERSATION_ID": self.session.conversation_id,
                "TETHER_PYTHON": sys.executable,  # bundled skills' scripts run with tether's Python
            },
        )

    def call_id_taken(self, tool_call_id: str) -> bool:
        """Whether this conversation already has an effect checkpoint under `tool_call_id`
        (asked only when a model proposes a call: a text turn never opens the database)."""
        from tether.runtime.checkpoints import conversation_scope

        store, _ = self.checkpoints()
        scope = conversation_scope(self.session.agent.id, self.session.conversation_id)
        return store.get(scope, tool_call_id) is not None

    def checkpoints(self) -> tuple[CheckpointStore, str]:
        """The effect-checkpoint store ($TETHER_HOME/checkpoints.db) and this process's owner
        id, opened on first use; the App Server hands in its own shared store."""
        if self.checkpoint_store is None:
            from tether.runtime.checkpoints import CheckpointStore, new_owner

            self.checkpoint_store = (CheckpointStore(self.store.home / "checkpoints.db"), new_owner())
        return self.checkpoint_store

    def recover_effects(self, emit: Callable[[Event], None] | None = None) -> list[RecoveredEffect]:
        """Answer tool calls a crashed run left open from their checkpoints: exact results,
        unknown outcomes (never re-run), or not started; each recovered one is also emitted as
        a tool return so the client sees it. Call while holding the turn lock."""
        from tether.runtime.checkpoints import conversation_scope, recover_open_calls

        groups = self.services.get("shell_groups")
        if groups is not None:  # shell commands a killed run left running: stop them first
            groups.reap_orphans()
        store, owner = self.checkpoints()
        session = self.session
        transcript = self.store.transcript(session.agent.id, session.conversation_id)
        scope = conversation_scope(session.agent.id, session.conversation_id)
        recovered, results = recover_open_calls(store, scope, owner, transcript.load())
        if results:
            transcript.append(results)
        if emit is not None:
            for r in recovered:
                emit(LocalToolReturn(ApprovalResult(r.tool_call_id, r.tool_name, r.output, r.is_error)))
        return recovered

    def begin_turn(self, user: UserMessage, emit: Callable[[Event], None] | None = None) -> UserMessage:
        """What every frontend does first under the turn lock: settle what a crashed run left
        (`recover_effects`), then put the notifications of background tasks that ended since the
        last turn in front of the user's message."""
        self.recover_effects(emit)
        subagents = self.services.get("subagents")
        notes = subagents.take_notifications() if subagents is not None else []
        if not notes:
            return user
        parts = tuple(TextPart(n) for n in notes)
        return UserMessage(user.id, (*parts, *user.content), user.timestamp, user.otid)

    def turn_deps(
        self,
        *,
        emit: Callable[[Event], None],
        approver: Approver,
        abort: asyncio.Event,
        max_turns: int | None,
        on_tool_start: Callable[[str], None] | None = None,
        on_tool_end: Callable[[str], None] | None = None,
    ) -> TurnDeps:
        """Every frontend's turn wiring. Effectful tool calls are checkpointed on every path:
        a durable `before` record, then the exact result (DESIGN §4 item 3)."""
        from tether.runtime.checkpoints import CheckpointHooks, conversation_scope

        flags = self.flags
        tool_hooks = permission_hooks = None
        if self.hooks is not None:
            from tether.runtime.hooks import SessionPermissionHooks, SessionToolHooks

            tool_hooks, permission_hooks = SessionToolHooks(self.hooks), SessionPermissionHooks(self.hooks)
        deps = TurnDeps(
            backend=self.backend,
            snapshot=lambda: self.contexts.snapshot(self.registry, self.cwd, flags.permission_mode),
            decide=self.policy or build_policy(flags, self.settings, self.cwd, Path.home()),
            approver=approver,
            make_run_context=self.make_run_context,
            emit=emit,
            abort=abort,
            max_turns=max_turns,
            tool_hooks=tool_hooks,
            permission_hooks=permission_hooks,
            before_turn=self.services["mcp"].ready if "mcp" in self.services else None,
        )
        if self.mods is not None:
            deps = self.mods.attach(deps)
        store, owner = self.checkpoints()
        scope = conversation_scope(self.session.agent.id, self.session.conversation_id)
        deps.tool_hooks = CheckpointHooks(
            store, scope, owner, inner=deps.tool_hooks, on_start=on_tool_start, on_end=on_tool_end
        )
        return deps

    async def shutdown(self) -> None:
        """Stop what the run started in the background: nothing outlives the process."""
        if self.mods is not None:
            await self.mods.close()
        if self.checkpoint_store is not None and not self.shared_checkpoints:
            self.checkpoint_store[0].close()
        for name in ("subagents", "background"):
            service = self.services.get(name)
            if service is not None:
                await service.stop_all()
        mcp = self.services.get("mcp")
        if mcp is not None:
            await mcp.close()
        sessions = self.services.get("exec_sessions")
        if sessions is not None:
            await sessions.close_all()


def prepare(flags: RunFlags) -> Prepared:
    """Resolve everything a run needs; raises TetherError with a message for the user."""
    from tether.providers.catalog import parse_handle, resolve_provider

    env = dict(os.environ)
    cwd = Path.cwd()
    store = LocalStore(tether_home(env))
    # Bad settings fail before anything is created; untrusted project settings are reported.
    settings = load_settings(store.home, cwd, "trusted" if flags.trust else None)
    for message in settings.ignored:
        print(f"tether: {message}", file=sys.stderr)
    if not flags.permission_mode_given and settings.permissions.mode is not None:
        flags.permission_mode = settings.permissions.mode
    from tether.runtime.sandboxing import sandbox_switch, shell_sandbox_from

    sandbox_switch(env, {"sandbox": settings.sandbox})  # a bad switch fails before anything is made
    hook_config = _hook_config(settings)  # bad hooks fail here, before anything is created
    from tether.runtime.backend_choice import build_backend
    from tether.runtime.mods.providers import ModProvider, is_mod_handle, no_mod_could_serve

    # A cloud run's agent, history and model live on a Letta server (None: the local backend).
    hosted = build_backend(flags, env, store.home, cwd, system=flags.system_custom)
    if flags.model is not None and hosted is None:  # a bad handle or a missing key fails first
        if not is_mod_handle(flags.model):
            resolve_provider(flags.model, store.home, env)
        elif why := no_mod_could_serve(flags.model, store.home, cwd, env, flags.no_mods):
            raise UsageError(why)
    backend: Any
    provider: Any = None
    if hosted is not None:
        session, backend = hosted
    else:
        session = resolve_session(
            store,
            agent_id=flags.agent,
            new_agent=flags.new_agent,
            conversation=flags.conversation,
            new_conversation=flags.new_conversation,
            model=flags.model,
            system=system_text(flags),
            tags=flags.tags,
            cwd=cwd,
            env=env,
        )
        if is_mod_handle(session.model):  # a mod's provider: bound once mods are loaded, below
            provider = ModProvider(session.model)
            provider_name, model_id = provider.prefix, provider.model_id
        else:
            provider_name, model_id = parse_handle(session.model)
            provider = resolve_provider(session.model, store.home, env)
        backend = LocalBackend(
            store,
            provider,
            provider_name=provider_name,
            model_id=model_id,
            system=session.agent.system or system_text(flags),
            cwd=cwd,
            platform=f"{platform.system()} {platform.release()}",
            today=date.today().isoformat(),
        )
    hooks = None
    if hook_config is not None:
        from tether.runtime.hooks import HookRunner, provider_model_call

        hooks = HookRunner(hook_config, cwd=cwd, agent_id=session.agent.id, session_id=session.agent.id,
                           ask_model=None if hosted is not None
                           else provider_model_call(provider, model_id, store.home, env))
    if hosted is None:
        backend.context_window = context_window(env, session.agent.model_settings, provider_name)
        backend.compaction_events = _CompactionEvents(hooks, lambda: prepared.mods)
        backend.compaction = CompactionSettings.from_dict(
            session.agent.extra.get("compaction_settings"), f"agent {session.agent.id}"
        )
    prepared = Prepared(flags, env, cwd, store, session, backend, build_registry(flags, session.model), hooks)
    if hosted is None:
        backend.call_id_taken = prepared.call_id_taken
    prepared.settings = settings
    prepared.policy = build_policy(flags, settings, cwd, Path(env.get("HOME") or Path.home()))
    prepared.policy.guards = file_guards(store.home, session.agent.id, env, scratch=prepared.scratch)
    prepared.services["tether_home"] = store.home
    prepared.services["read_denied"] = prepared.policy.read_denied()
    from tether.tools.background import BackgroundTasks

    # One pool per run, so shutdown stops every background task the run started.
    prepared.services["background"] = BackgroundTasks(prepared.scratch)
    from tether.tools.exec_command import ExecSessions

    prepared.services["exec_sessions"] = ExecSessions()  # exec_command's ptys, closed at shutdown
    from tether.tools.shell_groups import ShellGroups

    # Outside the scratch dir, where sandboxed commands can write: the ledger is tether's own.
    prepared.services["shell_groups"] = ShellGroups.for_conversation(store.home, session.conversation_id)
    sandbox = shell_sandbox_from(env, {"sandbox": settings.sandbox}, cwd, store.home, prepared.scratch)
    prepared.services["sandbox"] = sandbox
    from tether.runtime.confinement import Confinement

    confinement = Confinement(env, {"sandbox": settings.sandbox}, cwd, store.home, prepared.scratch)
    prepared.services["confinement"] = confinement
    prepared.policy.confinable = confinement.available
    from tether.tools.working_dir import WorkingDirectory

    working = WorkingDirectory(cwd, allowed=prepared.policy.scope.roots)
    prepared.services["working_directory"] = working
    working.listeners.append(lambda new: _follow_cwd(prepared, new))
    if sandbox is not None:  # file tools may not write where the sandboxed shell could not
        prepared.policy.guards = file_guards(
            store.home, session.agent.id, env, sandbox.policy.writable_roots, prepared.scratch
        )
    _add_subagents(prepared)
    if hosted is None:  # a hosted agent's memory lives on its server
        _add_memory(prepared)
    _add_mcp(prepared)
    if flags.tools is not None:
        unknown = sorted(set(flags.tools) - set(prepared.registry.names()))
        if unknown:
            raise UsageError(f"--tools names unknown tools: {', '.join(unknown)}")
        keep = set(flags.tools)
        prepared.registry = prepared.registry.filtered(lambda name: name in keep)
    from tether.runtime.mods import load_mods

    prepared.mods = load_mods(prepared)  # after --tools: mod tools go into the final registry
    if isinstance(provider, ModProvider):
        provider.bind(prepared.mods)
    from tether.runtime.reflection import attach_reflection

    if hosted is None:
        attach_reflection(prepared)  # services["reflection"].after_turn(): the post-turn trigger
    from tether.cli import gc_policy

    gc_policy.startup_done()
    return prepared


def _follow_cwd(prepared: Prepared, new: Path) -> None:
    """SetWorkingDirectory / EnterWorktree moved the conversation: the permission scope, the
    sandboxes' roots and the state guard follow the new working directory."""
    import dataclasses

    from tether.core.permissions.checker import Scope
    from tether.runtime.confinement import Confinement
    from tether.runtime.sandboxing import shell_sandbox_from

    p = prepared
    assert p.policy is not None
    p.cwd = new  # the system prompt keeps the folder the conversation started in (its cache)
    extra = p.settings.permissions.additional_directories
    p.policy.scope = Scope.of(new, p.policy.scope.home, (*p.policy.scope.roots[1:], *extra))
    box = {"sandbox": p.settings.sandbox}
    sandbox = shell_sandbox_from(p.env, box, new, p.store.home, p.scratch)
    p.services["sandbox"] = sandbox
    confinement = Confinement(p.env, box, new, p.store.home, p.scratch)
    p.services["confinement"] = confinement
    p.policy.confinable = confinement.available
    worktrees = p.store.home / "worktrees"
    guards = dataclasses.replace(
        p.policy.guards, own_state_dirs=(*p.policy.guards.own_state_dirs, worktrees.resolve()))
    if sandbox is not None:
        guards = dataclasses.replace(guards, writable_roots=sandbox.policy.writable_roots)
    p.policy.guards = guards


def _hook_config(settings: Settings) -> Any:
    """The merged hook configuration, or None when no settings file has a `hooks` key (the
    hook machinery is then never imported)."""
    if settings.hooks_user is None and not settings.hooks_project:
        return None
    from tether.runtime.hooks import merge_hooks

    user = settings.user
    return merge_hooks(
        settings.hooks_user, list(settings.hooks_project),
        user_source=str(user.path) if user else "user settings",
    )


def _add_memory(prepared: Prepared) -> None:
    """The agent's MemFS, the memory and Skill tools, the memory-aware system prompt."""
    from tether.runtime.prompt_cache import attach_memory, project_trusted

    f, store = prepared.flags, prepared.store
    attach_memory(
        registry=prepared.registry, backend=prepared.backend, store=store,
        agent=prepared.session.agent, cwd=prepared.cwd,
        trusted=project_trusted(prepared.settings.trust, f.trust, store.home, prepared.cwd),
        skills_dir=f.skills_dir, skill_sources=f.skill_sources, no_skills=f.no_skills,
        no_bundled_skills=f.no_bundled_skills, services=prepared.services,
        initial=_initial_blocks(f) if prepared.session.created_agent else (),
        warn=lambda m: print(f"tether: {m}", file=sys.stderr),
    )


def _initial_blocks(f: RunFlags) -> list[Any]:
    """A new agent's memory blocks from the SDK's flags (none for an existing agent)."""
    if not (f.init_blocks or f.memory_blocks or f.block_values):
        return []
    from tether.runtime.initial_blocks import initial_blocks

    return initial_blocks(f.init_blocks, f.memory_blocks, f.block_values)


def _add_mcp(prepared: Prepared) -> None:
    """The run's MCP servers (settings, `.mcp.json`, `--mcp-config`), started on the first turn;
    nothing is imported when no source names one."""
    f, cwd = prepared.flags, prepared.cwd
    sources = () if f.strict_mcp_config else prepared.settings.mcp_sources
    if not sources and not f.mcp_config and (f.strict_mcp_config or not (cwd / ".mcp.json").exists()):
        return
    from tether.mcp.config import resolve_config
    from tether.runtime.prompt_cache import project_trusted

    trusted = project_trusted(prepared.settings.trust, f.trust, prepared.store.home, cwd)
    config = resolve_config(sources, f.mcp_config, cwd=cwd, env=prepared.env, trusted=trusted,
                            project_file_too=not f.strict_mcp_config)
    for message in config.held_back:
        print(f"tether: {message}", file=sys.stderr)
    if not config.servers:
        return
    from tether.mcp.client import McpServers
    from tether.mcp.tools import registrar

    prepared.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = open(prepared.scratch / "mcp-servers.log", "ab")  # noqa: SIM115 - closed at shutdown
    servers = McpServers(config.servers, env=prepared.env, errlog=log)
    servers.on_change = registrar(lambda: prepared.registry, servers)
    prepared.services["mcp"] = servers


def _add_subagents(prepared: Prepared) -> None:
    from tether.runtime.subagents import ParentScope, Subagents, discover_types
    from tether.tools.task import AgentTool

    trusted = prepared.settings.trust == "trusted"
    types = discover_types(prepared.store.home, prepared.cwd, project_trusted=trusted)
    flags = prepared.flags
    scope = ParentScope(
        agent_id=prepared.session.agent.id,
        conversation_id=prepared.session.conversation_id,
        model=prepared.session.model,
        cwd=prepared.cwd,
        allowed_tools=tuple(flags.allowed_tools),
        disallowed_tools=tuple(flags.disallowed_tools),
        max_turns=flags.max_turns,
        trusted=trusted,
        tether_home=prepared.store.home,
        mcp_config=tuple(flags.mcp_config),
        strict_mcp_config=flags.strict_mcp_config,
    )
    hooks = prepared.hooks

    async def subagent_stop(task: Any) -> None:
        if hooks is not None:
            payload = hooks.payload("SubagentStop", subagent_type=task.type, subagent_id=task.id,
                                    success=task.error is None, **({"error": task.error} if task.error else {}))
            await hooks.run_parallel("SubagentStop", payload)

    session = prepared.session  # the task log: interrupted tasks and pending notifications
    task_log = prepared.store.conversation_dir(session.agent.id, session.conversation_id) / "tasks.jsonl"
    prepared.services["subagents"] = Subagents(scope, types, prepared.scratch, on_stop=subagent_stop,
                                               task_log=task_log)
    prepared.registry.register(AgentTool({t.name: t.description for t in types.values()}))


def read_prompt(flags: RunFlags) -> str:
    if flags.prompt is not None:
        return flags.prompt
    if sys.stdin is None or sys.stdin.isatty():
        raise TetherError("no prompt given: pass it after -p or pipe it on stdin")
    text = sys.stdin.read().strip()
    if not text:
        raise TetherError("the prompt on stdin was empty")
    return text
