"""One-shot headless runs (`tether -p`): resolve the session, run one user turn, render, exit.

Exit codes: 0 success, 1 error, 130 interrupted (SIGINT; the running tool's process group is
killed and the transcript keeps an answer for every tool call).
"""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import sys
import time
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from tether.cli.flags import RunFlags
from tether.cli.output import Renderer, StdoutGone
from tether.core.approvals import Classified
from tether.core.permissions import Decision, decide, headless_denial
from tether.core.prompt import DEFAULT_SYSTEM
from tether.core.tools import Tool, ToolContext, ToolContextStore, ToolRegistry, ToolRunContext
from tether.core.turn import ApprovalAnswer, TurnDeps, run_turn
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.chunks import now_ms
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.turns import ConversationRef


class HeadlessApprover:
    """One-shot headless has nobody to ask: every `ask` is denied with the hint that would allow it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def ask(self, item: Classified, ctx: ToolContext) -> ApprovalAnswer:
        effect = item.tool.effect if item.tool is not None else None
        from tether.core.tools import Effect

        return ApprovalAnswer(
            False, headless_denial(item.call.name, effect or Effect.EXEC, self.mode)
        )


class PermissionPolicy:
    """Mode plus the CLI's whole-tool allow/deny lists, as one `decide` for the turn engine."""

    def __init__(
        self, mode: str, allowed: list[str], disallowed: list[str], workspace: list[Path]
    ) -> None:
        self.mode = mode
        self.allowed = set(allowed)
        self.disallowed = set(disallowed)
        self.workspace = workspace

    def __call__(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Decision:
        if tool.name in self.disallowed:
            return Decision("deny", f"Permission denied by rule: {tool.name}", tool.name)
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


def read_prompt(flags: RunFlags) -> str:
    if flags.prompt is not None:
        return flags.prompt
    if sys.stdin is None or sys.stdin.isatty():
        raise TetherError("no prompt given: pass it after -p or pipe it on stdin")
    text = sys.stdin.read().strip()
    if not text:
        raise TetherError("the prompt on stdin was empty")
    return text


def run_headless(flags: RunFlags) -> int:
    if flags.input_format == "stream-json":
        sys.stderr.write(
            "Error: --input-format stream-json (bidirectional mode) is not available yet\n"
        )
        return 1
    started = time.monotonic()
    env = dict(os.environ)
    cwd = Path.cwd()
    try:
        from tether.backends.local.backend import LocalBackend
        from tether.backends.local.store import LocalStore
        from tether.runtime.session import resolve_session, tether_home

        prompt = read_prompt(flags)
        store = LocalStore(tether_home(env))
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
        from tether.providers.catalog import resolve_provider

        provider = resolve_provider(session.model, store.home, env)
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1

    envelope = wire.Envelope(session.agent.id, session.conversation_id)
    renderer = Renderer(flags.output_format, envelope, partial=flags.include_partial)
    registry = build_registry()
    contexts = ToolContextStore()
    backend = LocalBackend(
        store,
        provider,
        model_handle=session.model,
        system=session.agent.system or system_text(flags),
        cwd=cwd,
        platform=f"{platform.system()} {platform.release()}",
        today=date.today().isoformat(),
    )
    conversation = ConversationRef(session.agent.id, session.conversation_id)
    scratch = Path(env.get("TETHER_SCRATCHPAD") or store.home / "tmp" / session.conversation_id)
    services: dict[str, Any] = {}

    def make_run_context(tool_call_id: str) -> ToolRunContext:
        return ToolRunContext(
            cwd=cwd,
            tool_call_id=tool_call_id,
            scratch_dir=scratch,
            services=services,
            env={
                "TETHER_AGENT_ID": session.agent.id,
                "TETHER_CONVERSATION_ID": session.conversation_id,
            },
        )

    async def main() -> int:
        abort = asyncio.Event()
        loop = asyncio.get_running_loop()
        interrupted_by: list[int] = []

        def on_signal(signum: int) -> None:
            interrupted_by.append(signum)
            abort.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        deps = TurnDeps(
            backend=backend,
            snapshot=lambda: contexts.snapshot(registry, cwd, flags.permission_mode),
            decide=PermissionPolicy(
                flags.permission_mode, flags.allowed_tools, flags.disallowed_tools, [cwd]
            ),
            approver=HeadlessApprover(flags.permission_mode),
            make_run_context=make_run_context,
            emit=renderer.on_event,
            abort=abort,
            max_turns=flags.max_turns,
        )
        try:
            renderer.emit_init(
                model=session.model,
                tools=registry.names(),
                cwd=str(cwd),
                permission_mode=flags.permission_mode,
            )
            user = UserMessage(f"ui-msg-{now_ms()}", (TextPart(prompt),), now_ms())
            with store.turn_lock(session.agent.id, session.conversation_id):
                outcome = await run_turn(deps, conversation, user)
            code = renderer.finish(
                outcome,
                duration_ms=int((time.monotonic() - started) * 1000),
                api_ms=backend.api_ms,
            )
            if interrupted_by and interrupted_by[0] == signal.SIGTERM and code == 130:
                code = 143
            return code
        finally:
            background = services.get("background")
            if background is not None:
                await background.stop_all()

    try:
        return asyncio.run(main())
    except StdoutGone as exc:
        sys.stderr.write(f"Error: could not write the result to stdout ({exc})\n")
        return 1
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
