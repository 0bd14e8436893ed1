"""The session a run holds once assembled (`runtime.assembly.prepare`): store, agent and
conversation, backend, tools, policy and services, and what every frontend does with them (turn
wiring, effect recovery, shutdown)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.backends.store_api import ConversationStore
from tether.core.permissions.rules import parse_rule
from tether.core.services import Services
from tether.core.tools import ToolContext, ToolContextStore, ToolRegistry, ToolRunContext
from tether.core.turn import Approver, Event, TurnDeps
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.tool_calls import ToolReturn
from tether.protocol.turns import ConversationRef, LocalToolReturn
from tether.runtime.policy.permission_policy import PermissionPolicy, build_policy
from tether.runtime.session.session import Session
from tether.runtime.session.settings import Settings

if TYPE_CHECKING:
    from tether.backends.api.backend import ApiBackend
    from tether.backends.local.backend import LocalBackend
    from tether.core.approvals import DecideFn
    from tether.core.execution import ToolHooks
    from tether.core.turn import PermissionHooks, TurnEvents
    from tether.runtime.extensions.hooks import HookRunner
    from tether.runtime.extensions.mods import ModSession
    from tether.runtime.session.flags import RunFlags
    from tether.runtime.turns.checkpoints import CheckpointStore, RecoveredEffect


@dataclass
class Prepared:
    flags: RunFlags
    env: dict[str, str]
    cwd: Path
    store: ConversationStore
    session: Session
    backend: LocalBackend | ApiBackend  # the Letta API server's for a cloud run (--backend cloud)
    registry: ToolRegistry
    hooks: HookRunner | None = None
    policy: PermissionPolicy | None = None
    settings: Settings = field(default_factory=Settings)
    contexts: ToolContextStore = field(default_factory=ToolContextStore)
    services: Services = field(default_factory=Services)
    mods: ModSession | None = None  # None when mods are off
    checkpoint_store: tuple[CheckpointStore, str] | None = None
    shared_checkpoints: bool = False  # the store belongs to someone else (the App Server)
    user_home: Path = field(default_factory=lambda: Path("/"))  # `~` in permission rules
    warnings: list[str] = field(default_factory=list)  # for the frontend to show, never printed

    @property
    def conversation(self) -> ConversationRef:
        return ConversationRef(self.session.agent.id, self.session.conversation_id)

    @property
    def scratch(self) -> Path:
        value = self.env.get("TETHER_SCRATCHPAD")
        return Path(value) if value else self.store.home / "tmp" / self.session.conversation_id

    async def start_tool_sources(self, abort: asyncio.Event | None = None) -> list[dict[str, Any]]:
        """Start the run's MCP servers and wait (each within its start timeout, or until `abort`)
        until they are connected or failed; their status, for the init event. Nothing when none
        is configured."""
        mcp = self.services.mcp
        if mcp is None:
            return []
        await mcp.ready(abort)
        return mcp.status()

    def add_session_rule(self, text: str) -> None:
        """An "always allow" answer: the rule holds for the rest of this process."""
        if self.policy is None:
            self.policy = self._default_policy()
        self.policy.add_session_allow(parse_rule(text))

    def _default_policy(self) -> PermissionPolicy:
        f = self.flags
        return build_policy(self.settings, self.cwd, self.user_home, f.allowed_tools, f.disallowed_tools)

    def make_run_context(self, tool_call_id: str) -> ToolRunContext:
        from tether.runtime.manage.secrets_ops import secret_env

        return ToolRunContext(
            cwd=self.cwd,
            tool_call_id=tool_call_id,
            scratch_dir=self.scratch,
            services=self.services,
            env={
                # the agent's secrets (secret_apply), read per call: the next call has them
                **secret_env(self.store, self.session.agent.id),
                "TETHER_AGENT_ID": self.session.agent.id,
                "TETHER_CONVERSATION_ID": self.session.conversation_id,
                "TETHER_PYTHON": sys.executable,  # bundled skills' scripts run with tether's Python
            },
        )

    def call_id_taken(self, tool_call_id: str) -> bool:
        """Whether this conversation already has an effect checkpoint under `tool_call_id`
        (asked only when a model proposes a call: a text turn never opens the database)."""
        from tether.runtime.turns.checkpoints import EffectStoreUnavailable, conversation_scope

        store, _ = self.checkpoints()
        scope = conversation_scope(self.session.agent.id, self.session.conversation_id)
        try:
            return store.get(scope, tool_call_id) is not None
        except (EffectStoreUnavailable, OSError):
            # No store to ask: the call's `before` record fails the same way, so it is refused
            # without running and the run fails naming the store (not the id check).
            return False

    def checkpoints(self) -> tuple[CheckpointStore, str]:
        """The effect-checkpoint store ($TETHER_HOME/checkpoints.db) and this process's owner
        id, opened on first use; the App Server hands in its own shared store."""
        if self.checkpoint_store is None:
            from tether.runtime.turns.checkpoints import CheckpointStore, new_owner

            self.checkpoint_store = (CheckpointStore(self.store.home / "checkpoints.db"), new_owner())
        return self.checkpoint_store

    def recover_effects(self, emit: Callable[[Event], None] | None = None) -> list[RecoveredEffect]:
        """Answer tool calls a crashed run left open from their checkpoints: exact results,
        unknown outcomes (never re-run), or not started; each recovered one is also emitted as
        a tool return so the client sees it. Call while holding the turn lock."""
        from tether.runtime.turns.checkpoints import conversation_scope, recover_open_calls

        groups = self.services.shell_groups
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
                emit(LocalToolReturn(ToolReturn(r.tool_call_id, r.tool_name, r.output, r.is_error)))
        return recovered

    def begin_turn(self, user: UserMessage, emit: Callable[[Event], None] | None = None) -> UserMessage:
        """What every frontend does first under the turn lock: settle what a crashed run left
        (`recover_effects`), then put the notifications of background tasks that ended since the
        last turn in front of the user's message."""
        self.recover_effects(emit)
        subagents = self.services.subagents
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
        on_store_unavailable: Callable[[str], None] | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> TurnDeps:
        """Every frontend's turn wiring, the one place a `TurnDeps` is built: the policy (mods'
        permission checks around it), the tool hooks (settings hooks, mods' `tool_start`/
        `tool_end`, then effect checkpoints around them all: a durable `before` record, then
        the exact result, DESIGN §4 item 3), mods' turn events, and `on_send` told before each
        request (each send takes a fresh tool-context snapshot)."""
        from tether.runtime.turns.checkpoints import CheckpointHooks, conversation_scope

        flags = self.flags
        decide: DecideFn = self.policy or self._default_policy()
        tool_hooks: ToolHooks | None = None
        permission_hooks: PermissionHooks | None = None
        events: TurnEvents | None = None
        if self.hooks is not None:
            from tether.runtime.extensions.hooks import SessionPermissionHooks, SessionToolHooks

            tool_hooks, permission_hooks = SessionToolHooks(self.hooks), SessionPermissionHooks(self.hooks)
        if self.mods is not None:
            from tether.runtime.extensions.mods import ModToolHooks

            decide, tool_hooks, events = self.mods.guard(decide), ModToolHooks(self.mods, tool_hooks), self.mods
        store, owner = self.checkpoints()
        scope = conversation_scope(self.session.agent.id, self.session.conversation_id)
        checkpoints = CheckpointHooks(store, scope, owner, inner=tool_hooks, on_start=on_tool_start,
                                      on_end=on_tool_end)
        checkpoints.on_unavailable = on_store_unavailable

        def snapshot() -> ToolContext:
            if on_send is not None:
                on_send()  # the moment a request goes out
            return self.contexts.snapshot(self.registry, self.cwd, flags.permission_mode)

        mcp = self.services.mcp
        return TurnDeps(
            backend=self.backend,
            snapshot=snapshot,
            decide=decide,
            approver=approver,
            make_run_context=self.make_run_context,
            emit=emit,
            abort=abort,
            max_turns=max_turns,
            tool_hooks=checkpoints,
            permission_hooks=permission_hooks,
            events=events,
            before_turn=partial(mcp.ready, abort) if mcp is not None else None,
        )

    async def shutdown(self) -> None:
        """Stop what the run started in the background: nothing outlives the process."""
        if self.mods is not None:
            await self.mods.close()
        if self.checkpoint_store is not None and not self.shared_checkpoints:
            self.checkpoint_store[0].close()
        pools = (self.services.subagents, self.services.background)
        for service in pools:
            if service is not None:
                await service.stop_all()
        mcp = self.services.mcp
        if mcp is not None:
            await mcp.close()
        sessions = self.services.exec_sessions
        if sessions is not None:
            await sessions.close_all()
