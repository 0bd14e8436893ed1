"""One-shot headless runs (`tether -p`): resolve the session, run one user turn, render, exit.

Exit codes: 0 success, 1 error, 130 interrupted (SIGINT; the running tool's process group is
killed and the transcript keeps an answer for every tool call), 143 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

from tether.cli.flags import RunFlags
from tether.cli.output import Renderer, StdoutGone
from tether.core.approvals import Classified
from tether.core.permissions import headless_denial
from tether.core.tools import Effect, ToolContext
from tether.core.turn import ApprovalAnswer, TurnOutcome, run_turn
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.chunks import now_ms
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.turns import TurnError


class HeadlessApprover:
    """One-shot headless has nobody to ask: every `ask` is denied with the hint that would allow it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def ask(self, item: Classified, ctx: ToolContext) -> ApprovalAnswer:
        effect = item.tool.effect if item.tool is not None else Effect.EXEC
        message = headless_denial(item.call.name, effect, self.mode)
        return ApprovalAnswer(False, f"{message} ({item.decision.reason})")


def run_headless(flags: RunFlags) -> int:
    started = time.monotonic()
    try:
        from tether.cli.runner import prepare, read_prompt

        if flags.input_format == "stream-json":
            from tether.cli.bidirectional import run_bidirectional

            return run_bidirectional(prepare(flags))
        prompt = read_prompt(flags)
        prepared = prepare(flags)
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1

    session = prepared.session
    envelope = wire.Envelope(session.agent.id, session.conversation_id)
    renderer = Renderer(flags.output_format, envelope, partial=flags.include_partial)
    subagents = prepared.services.get("subagents")
    if subagents is not None and flags.output_format == "stream-json":  # child progress, tagged
        from tether.cli.output import write_line

        subagents.progress = lambda event: write_line(envelope.wrap(event))

    async def main() -> int:
        abort = asyncio.Event()
        signals: list[int] = []

        def on_signal(signum: int) -> None:
            signals.append(signum)
            abort.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        deps = prepared.turn_deps(
            emit=renderer.on_event,
            approver=HeadlessApprover(flags.permission_mode),
            abort=abort,
            max_turns=flags.max_turns,
        )
        try:
            renderer.emit_init(
                model=session.model,
                tools=prepared.registry.names(),
                cwd=str(prepared.cwd),
                permission_mode=flags.permission_mode,
            )
            user = UserMessage(f"ui-msg-{now_ms()}", (TextPart(prompt),), now_ms())
            try:
                with prepared.store.turn_lock(session.agent.id, session.conversation_id):
                    user = prepared.begin_turn(user, renderer.on_event)
                    outcome = await run_turn(deps, prepared.conversation, user)
            except TetherError as exc:  # e.g. a busy conversation, a damaged transcript
                failure = TurnError(str(exc), "error")
                outcome = TurnOutcome(stop_reason="error", error=failure)
                renderer.on_event(failure)
            code = renderer.finish(
                outcome,
                duration_ms=int((time.monotonic() - started) * 1000),
                api_ms=prepared.backend.api_ms,
            )
            if code == 0 and "reflection" in prepared.services:
                await prepared.services["reflection"].after_turn(abort)
            return 143 if code == 130 and signals[:1] == [signal.SIGTERM] else code
        finally:
            await prepared.shutdown()

    try:
        return asyncio.run(main())
    except StdoutGone as exc:
        sys.stderr.write(f"Error: could not write the result to stdout ({exc})\n")
        return 1
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
