"""One-shot headless runs (`tether -p`): resolve the session, run one user turn, render, exit.

Exit codes: 0 success, 1 error, 130 / 143 / 129 after SIGINT / SIGTERM / SIGHUP (the running
tool's process group is killed and the transcript keeps an answer for every tool call; see
`cli/stopping.py`). tether's own state failing (a full disk, a read-only TETHER_HOME, the effect
store) is an error naming the path and the cause, with a `result` line for stream-json.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from tether.backends.local.locks import state_failure
from tether.cli.flags import RunFlags
from tether.cli.output import Renderer, StdoutGone, init_fields, report_failure, say
from tether.cli.stopping import RunStop
from tether.core.approvals import Classified
from tether.core.permissions import headless_denial
from tether.core.tools import Effect, ToolContext
from tether.core.turn import ApprovalAnswer, Event, TurnOutcome
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.chunks import now_ms
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.turns import TurnError
from tether.runtime.conversation import Conversation

if TYPE_CHECKING:
    from tether.runtime.prepared import Prepared


class HeadlessApprover:
    """One-shot headless has nobody to ask: every `ask` is denied with the hint that would allow it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def ask(self, item: Classified, ctx: ToolContext) -> ApprovalAnswer:
        effect = item.tool.effect if item.tool is not None else Effect.EXEC
        message = headless_denial(item.call.name, effect, self.mode)
        return ApprovalAnswer(False, f"{message} ({item.decision.reason})")


def check_for_updates(prepared: Prepared) -> Prepared:
    """The daily update check: a stat and a small read on most runs; the network and any
    install happen in a detached child, and the next start prints what it did."""
    from tether.runtime.updater import startup_check

    startup_check(prepared.env, prepared.store.home)
    return prepared


def run_headless(flags: RunFlags) -> int:
    started = time.monotonic()
    try:
        from tether.cli.runner import prepare, read_prompt

        if flags.input_format == "stream-json":
            from tether.cli.bidirectional import run_bidirectional

            return run_bidirectional(check_for_updates(prepare(flags)))
        prompt = read_prompt(flags)
        prepared = check_for_updates(prepare(flags))
    except (TetherError, OSError) as exc:
        message = state_failure(exc)
        if message is None:
            if not isinstance(exc, TetherError):
                raise
            say(f"Error: {exc}")
            return 1
        return report_failure(flags.output_format, wire.Envelope(None, None), message,
                              duration_ms=int((time.monotonic() - started) * 1000))

    session = prepared.session
    envelope = wire.Envelope(session.agent.id, session.conversation_id)
    renderer = Renderer(flags.output_format, envelope, partial=flags.include_partial)
    subagents = prepared.services.subagents
    if subagents is not None and flags.output_format == "stream-json":  # child progress, tagged
        from tether.cli.output import write_line

        subagents.progress = lambda event: write_line(envelope.wrap(event))
    stops: list[RunStop] = []

    async def main() -> int:
        abort = asyncio.Event()
        stop = RunStop(abort)
        stops.append(stop)
        stop.install(asyncio.get_running_loop())

        def emit(event: Event) -> None:
            renderer.on_event(stop.retitle(event))

        conversation = Conversation(prepared)
        try:
            await prepared.start_tool_sources()  # MCP servers: connected or failed, each bounded
            renderer.emit_init(**init_fields(prepared))
            user = UserMessage(f"ui-msg-{now_ms()}", (TextPart(prompt),), now_ms())
            state_failed = False
            try:
                outcome = await conversation.turn(
                    user, emit=emit, approver=HeadlessApprover(flags.permission_mode), abort=abort,
                    max_turns=flags.max_turns, on_store_unavailable=stop.on_store_unavailable,
                )
            except (TetherError, OSError) as exc:  # a busy conversation, a damaged transcript, a full disk
                message = state_failure(exc)
                if message is None and not isinstance(exc, TetherError):
                    raise
                state_failed = message is not None
                failure = TurnError(message or str(exc), "error")
                outcome = TurnOutcome(stop_reason="error", error=failure)
                emit(failure)
            if outcome.error is not None:
                outcome.error = stop.retitle(outcome.error)
                outcome.stop_reason = outcome.error.stop_reason
            code = renderer.finish(
                outcome,
                duration_ms=int((time.monotonic() - started) * 1000),
                api_ms=prepared.backend.api_ms,
                result_on_error=state_failed or stop.failure is not None,
            )
            if code == 0:
                await conversation.reflect(abort)
            return stop.exit_code(code)
        finally:
            try:
                await prepared.shutdown()
            except (TetherError, OSError) as exc:  # the run's answer stands; say what was left
                say(f"tether: while shutting down: {exc}")

    try:
        return asyncio.run(main())
    except StdoutGone as exc:
        say(f"Error: could not write the result to stdout ({exc})")
        return stops[0].exit_code(1) if stops else 1
    except TetherError as exc:
        say(f"Error: {exc}")
        return 1
