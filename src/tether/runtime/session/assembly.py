"""Assembling a run's session from the user's choices and an explicit `RunSpec`: settings,
provider and backend, hooks, tools, permission policy, services, subagents, memory, MCP, mods."""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.backends.local.backend import LocalBackend
from tether.backends.local.compaction import CompactionSettings
from tether.backends.local.store import LocalStore
from tether.core.prompt import DEFAULT_SYSTEM
from tether.core.tools import ToolRegistry
from tether.errors import UsageError
from tether.runtime.policy.permission_policy import build_policy, file_guards
from tether.runtime.session.prepared import Prepared
from tether.runtime.session.session import resolve_session, tether_home
from tether.runtime.session.settings import Settings, load_settings

if TYPE_CHECKING:
    from tether.runtime.extensions.hooks import HookRunner
    from tether.runtime.session.flags import RunFlags


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
class RunSpec:
    """Where a run happens, passed in by the frontend (nothing here reads the process): the
    working directory, the environment, the user's home (for `~` in rules), and the list the
    assembly adds warnings to (the frontend shows them, even when assembly fails)."""

    cwd: Path
    env: Mapping[str, str]
    home: Path
    warnings: list[str] = field(default_factory=list)
    # The agents/conversations/transcripts store (backends/store_api.py) when the frontend has
    # chosen one (the App Server's, server/runtime_start.open_store); None: TETHER_HOME's files.
    store: Any = None


def prepare(flags: RunFlags, spec: RunSpec) -> Prepared:
    """Resolve everything a run needs; raises TetherError with a message for the user."""
    from tether.providers.catalog import parse_handle, resolve_provider

    env = dict(spec.env)
    cwd = spec.cwd
    store = spec.store if spec.store is not None else LocalStore(tether_home(env))
    # Bad settings fail before anything is created; untrusted project settings are reported.
    settings = load_settings(store.home, cwd, "trusted" if flags.trust else None)
    spec.warnings.extend(settings.ignored)
    if not flags.permission_mode_given and settings.permissions.mode is not None:
        flags.permission_mode = settings.permissions.mode
    from tether.runtime.policy.sandboxing import sandbox_switch, shell_sandbox_from

    sandbox_switch(env, {"sandbox": settings.sandbox})  # a bad switch fails before anything is made
    hook_config = _hook_config(settings)  # bad hooks fail here, before anything is created
    from tether.runtime.extensions.mods.providers import (
        ModProvider,
        is_mod_handle,
        no_mod_could_serve,
    )
    from tether.runtime.session.backend_choice import build_backend

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
        from tether.runtime.extensions.hooks import HookRunner, provider_model_call

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
    prepared.user_home = spec.home
    prepared.warnings = spec.warnings
    prepared.policy = build_policy(settings, cwd, spec.home, flags.allowed_tools, flags.disallowed_tools)
    prepared.policy.guards = file_guards(store.home, session.agent.id, env, scratch=prepared.scratch)
    prepared.services.tether_home = store.home
    prepared.services.read_denied = prepared.policy.read_denied()
    from tether.tools.background import BackgroundTasks

    # One pool per run, so shutdown stops every background task the run started.
    prepared.services.background = BackgroundTasks(prepared.scratch)
    from tether.tools.exec_command import ExecSessions

    prepared.services.exec_sessions = ExecSessions()  # exec_command's ptys, closed at shutdown
    from tether.tools.shell_groups import ShellGroups

    # Outside the scratch dir, where sandboxed commands can write: the ledger is tether's own.
    prepared.services.shell_groups = ShellGroups.for_conversation(store.home, session.conversation_id)
    sandbox = shell_sandbox_from(env, {"sandbox": settings.sandbox}, cwd, store.home, prepared.scratch)
    if sandbox is not None and prepared.policy.scope.armed_files:  # the scripts hooks run
        from dataclasses import replace

        sandbox = replace(sandbox, readonly_files=prepared.policy.scope.armed_files)
    prepared.services.sandbox = sandbox
    from tether.runtime.policy.confinement import Confinement

    confinement = Confinement(env, {"sandbox": settings.sandbox}, cwd, store.home, prepared.scratch)
    prepared.services.confinement = confinement
    prepared.policy.confinable = confinement.available
    from tether.tools.working_dir import WorkingDirectory

    working = WorkingDirectory(cwd, allowed=prepared.policy.scope.roots)
    prepared.services.working_directory = working
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
    from tether.runtime.extensions.mods import load_mods

    prepared.mods = load_mods(prepared)  # after --tools: mod tools go into the final registry
    if isinstance(provider, ModProvider):
        provider.bind(prepared.mods)
    from tether.runtime.agents.reflection import attach_reflection

    if hosted is None:
        attach_reflection(prepared)  # services.reflection.after_turn(): the post-turn trigger
    return prepared


def _follow_cwd(prepared: Prepared, new: Path) -> None:
    """SetWorkingDirectory / EnterWorktree moved the conversation: the permission scope, the
    sandboxes' roots and the state guard follow the new working directory."""
    import dataclasses

    from tether.core.permissions.checker import Scope
    from tether.runtime.policy.confinement import Confinement
    from tether.runtime.policy.sandboxing import shell_sandbox_from

    p = prepared
    assert p.policy is not None
    p.cwd = new  # the system prompt keeps the folder the conversation started in (its cache)
    extra = p.settings.permissions.additional_directories
    armed = p.policy.scope
    p.policy.scope = dataclasses.replace(
        Scope.of(new, armed.home, (*armed.roots[1:], *extra)),
        armed_names=armed.armed_names, armed_files=armed.armed_files)
    box = {"sandbox": p.settings.sandbox}
    sandbox = shell_sandbox_from(p.env, box, new, p.store.home, p.scratch)
    if sandbox is not None and armed.armed_files:
        sandbox = dataclasses.replace(sandbox, readonly_files=armed.armed_files)
    p.services.sandbox = sandbox
    confinement = Confinement(p.env, box, new, p.store.home, p.scratch)
    p.services.confinement = confinement
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
    from tether.runtime.extensions.hooks import merge_hooks

    user = settings.user
    return merge_hooks(
        settings.hooks_user, list(settings.hooks_project),
        user_source=str(user.path) if user else "user settings",
    )


def _add_memory(prepared: Prepared) -> None:
    """The agent's MemFS, the memory and Skill tools, the memory-aware system prompt."""
    from tether.runtime.session.prompt_cache import attach_memory, project_trusted
    from tether.tools.toolsets import memory_tool_names

    f, store, backend = prepared.flags, prepared.store, prepared.backend
    assert isinstance(backend, LocalBackend)  # a hosted agent's memory lives on its server
    attach_memory(
        registry=prepared.registry, backend=backend, store=store,
        agent=prepared.session.agent, cwd=prepared.cwd,
        trusted=project_trusted(prepared.settings.trust, f.trust, store.home, prepared.cwd),
        skills_dir=f.skills_dir, skill_sources=f.skill_sources, no_skills=f.no_skills,
        no_bundled_skills=f.no_bundled_skills, services=prepared.services,
        initial=_initial_blocks(f) if prepared.session.created_agent else (),
        warn=prepared.warnings.append,
        memory_tools=memory_tool_names(f.toolset, prepared.session.model, f.tools),
    )


def _initial_blocks(f: RunFlags) -> list[Any]:
    """A new agent's memory blocks from the SDK's flags (none for an existing agent)."""
    if not (f.init_blocks or f.memory_blocks or f.block_values):
        return []
    from tether.runtime.session.initial_blocks import initial_blocks

    return initial_blocks(f.init_blocks, f.memory_blocks, f.block_values)


def _add_mcp(prepared: Prepared) -> None:
    """The run's MCP servers (settings, `.mcp.json`, `--mcp-config`), started on the first turn;
    nothing is imported when no source names one."""
    f, cwd = prepared.flags, prepared.cwd
    sources = () if f.strict_mcp_config else prepared.settings.mcp_sources
    if not sources and not f.mcp_config and (f.strict_mcp_config or not (cwd / ".mcp.json").exists()):
        return
    from tether.mcp.config import resolve_config
    from tether.runtime.session.prompt_cache import project_trusted

    trusted = project_trusted(prepared.settings.trust, f.trust, prepared.store.home, cwd)
    config = resolve_config(sources, f.mcp_config, cwd=cwd, env=prepared.env, trusted=trusted,
                            project_file_too=not f.strict_mcp_config)
    prepared.warnings.extend(config.held_back)
    if not config.servers:
        return
    from tether.mcp.client import McpServers
    from tether.mcp.tools import registrar

    prepared.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = open(prepared.scratch / "mcp-servers.log", "ab")  # noqa: SIM115 - closed at shutdown
    servers = McpServers(config.servers, env=prepared.env, errlog=log,
                         call_timeout_ms=prepared.settings.mcp_tool_timeout_ms)
    servers.on_change = registrar(lambda: prepared.registry, servers)
    prepared.services.mcp = servers


def _add_subagents(prepared: Prepared) -> None:
    from tether.runtime.agents.subagent_launch import store_url
    from tether.runtime.agents.subagents import ParentScope, Subagents, discover_types
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
        store_url=store_url(prepared.store),
    )
    hooks = prepared.hooks

    async def subagent_stop(task: Any) -> None:
        if hooks is not None:
            await hooks.subagent_stop(subagent_type=task.type, subagent_id=task.id,
                                      success=task.error is None, error=task.error)

    session = prepared.session  # the task log: interrupted tasks and pending notifications
    task_log = prepared.store.conversation_dir(session.agent.id, session.conversation_id) / "tasks.jsonl"
    prepared.services.subagents = Subagents(scope, types, prepared.scratch, on_stop=subagent_stop,
                                               task_log=task_log, env=prepared.env,
                                               store=prepared.store)
    prepared.registry.register(AgentTool({t.name: t.description for t in types.values()}))
