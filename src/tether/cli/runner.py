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
from typing import Any

import orjson

from tether.backends.local.backend import LocalBackend
from tether.backends.local.store import LocalStore
from tether.cli.flags import RunFlags
from tether.core.permissions import Decision, decide
from tether.core.prompt import DEFAULT_SYSTEM
from tether.core.tools import Tool, ToolContext, ToolContextStore, ToolRegistry, ToolRunContext
from tether.core.turn import Approver, Event, TurnDeps
from tether.errors import TetherError, UsageError
from tether.protocol.turns import ConversationRef
from tether.runtime.hooks import (
    HookConfig,
    HookRunner,
    SessionPermissionHooks,
    SessionToolHooks,
    merge_hooks,
)
from tether.runtime.session import Session, resolve_session, tether_home


class PermissionPolicy:
    """Mode plus the CLI's whole-tool allow/deny lists, as one `decide` for the turn engine."""

    def __init__(self, allowed: list[str], disallowed: list[str], workspace: list[Path]) -> None:
        self.allowed = set(allowed)
        self.disallowed = set(disallowed)
        self.workspace = workspace

    def __call__(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Decision:
        if tool.name in self.disallowed:
            return Decision("deny", f"Permission denied by rule: {tool.name}", tool.name)
        if getattr(tool, "external", False):
            return Decision("allow", "external tool: the client that registered it executes it")
        decision = decide(
            tool.name, tool.effect, tool.paths(args, ctx.cwd), ctx.permission_mode, self.workspace
        )
        if decision.verdict == "ask" and tool.name in self.allowed:
            return Decision("allow", f"allowed by --allowedTools {tool.name}", tool.name)
        return decision


def build_registry() -> ToolRegistry:
    from tether.tools.builtin import register_builtin_tools

    registry = ToolRegistry()
    register_builtin_tools(registry)
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
    backend: LocalBackend
    registry: ToolRegistry
    hooks: HookRunner | None = None
    contexts: ToolContextStore = field(default_factory=ToolContextStore)
    services: dict[str, Any] = field(default_factory=dict)

    @property
    def conversation(self) -> ConversationRef:
        return ConversationRef(self.session.agent.id, self.session.conversation_id)

    @property
    def scratch(self) -> Path:
        value = self.env.get("TETHER_SCRATCHPAD")
        return Path(value) if value else self.store.home / "tmp" / self.session.conversation_id

    def make_run_context(self, tool_call_id: str) -> ToolRunContext:
        return ToolRunContext(
            cwd=self.cwd,
            tool_call_id=tool_call_id,
            scratch_dir=self.scratch,
            services=self.services,
            env={
                "TETHER_AGENT_ID": self.session.agent.id,
                "TETHER_CONVERSATION_ID": self.session.conversation_id,
            },
        )

    def turn_deps(
        self, *, emit: Callable[[Event], None], approver: Approver, abort: asyncio.Event, max_turns: int | None
    ) -> TurnDeps:
        flags = self.flags
        return TurnDeps(
            backend=self.backend,
            snapshot=lambda: self.contexts.snapshot(self.registry, self.cwd, flags.permission_mode),
            decide=PermissionPolicy(flags.allowed_tools, flags.disallowed_tools, [self.cwd]),
            approver=approver,
            make_run_context=self.make_run_context,
            emit=emit,
            abort=abort,
            max_turns=max_turns,
            tool_hooks=SessionToolHooks(self.hooks) if self.hooks else None,
            permission_hooks=SessionPermissionHooks(self.hooks) if self.hooks else None,
        )

    async def shutdown(self) -> None:
        """Stop what the run started in the background: nothing outlives the process."""
        for name in ("subagents", "background"):
            service = self.services.get(name)
            if service is not None:
                await service.stop_all()


def prepare(flags: RunFlags) -> Prepared:
    """Resolve everything a run needs; raises TetherError with a message for the user."""
    from tether.providers.catalog import parse_handle, resolve_provider

    env = dict(os.environ)
    cwd = Path.cwd()
    store = LocalStore(tether_home(env))
    hook_config = load_hook_config(store.home, cwd)  # bad settings fail before anything is created
    if flags.model is not None:  # a bad handle or a missing key fails before anything is created
        resolve_provider(flags.model, store.home, env)
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
    hooks = HookRunner(hook_config, cwd=cwd, agent_id=session.agent.id, session_id=session.agent.id)
    prepared = Prepared(flags, env, cwd, store, session, backend, build_registry(), hooks)
    from tether.tools.background import BackgroundTasks

    # One pool per run, so shutdown stops every background task the run started.
    prepared.services["background"] = BackgroundTasks(prepared.scratch)
    _add_subagents(prepared)
    if flags.tools is not None:
        unknown = sorted(set(flags.tools) - set(prepared.registry.names()))
        if unknown:
            raise UsageError(f"--tools names unknown tools: {', '.join(unknown)}")
        keep = set(flags.tools)
        prepared.registry = prepared.registry.filtered(lambda name: name in keep)
    return prepared


def _add_subagents(prepared: Prepared) -> None:
    from tether.runtime.subagents import ParentScope, Subagents, discover_types
    from tether.tools.task import AgentTool

    types = discover_types(prepared.store.home, prepared.cwd, project_trusted=False)
    flags = prepared.flags
    scope = ParentScope(
        agent_id=prepared.session.agent.id,
        conversation_id=prepared.session.conversation_id,
        model=prepared.session.model,
        cwd=prepared.cwd,
        allowed_tools=tuple(flags.allowed_tools),
        disallowed_tools=tuple(flags.disallowed_tools),
    )
    hooks = prepared.hooks

    async def subagent_stop(task: Any) -> None:
        if hooks is not None:
            payload = hooks.payload("SubagentStop", subagent_type=task.type, subagent_id=task.id,
                                    success=task.error is None, **({"error": task.error} if task.error else {}))
            await hooks.run_parallel("SubagentStop", payload)

    prepared.services["subagents"] = Subagents(scope, types, prepared.scratch, on_stop=subagent_stop)
    prepared.registry.register(AgentTool({t.name: t.description for t in types.values()}))


def load_hook_config(home: Path, cwd: Path) -> HookConfig:
    """Hooks from the user's settings (always trusted); project hooks wait for folder trust."""
    path = home / "settings.json"
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return HookConfig()
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: settings must be a JSON object")
    return merge_hooks(raw.get("hooks"), [], user_source=str(path))


def read_prompt(flags: RunFlags) -> str:
    if flags.prompt is not None:
        return flags.prompt
    if sys.stdin is None or sys.stdin.isatty():
        raise TetherError("no prompt given: pass it after -p or pipe it on stdin")
    text = sys.stdin.read().strip()
    if not text:
        raise TetherError("the prompt on stdin was empty")
    return text
