"""One-shot headless runs (`tether -p`): resolve the session, submit one user turn to the
conversation's inbox (`runtime/turns/inbox.py`), render it, exit.

Exit codes: 0 success, 1 error, 130 / 143 / 129 after SIGINT / SIGTERM / SIGHUP (the running
tool's process group is killed and the transcript keeps an answer for every tool call; see
`cli/stopping.py`). tether's own state failing (a full disk, a read-only TETHER_HOME, the effect
store) is an error naming the path and the cause, with a `result` line for stream-json.

With `--store postgresql://…` the run's agents, conversations, transcript, effect checkpoints
and memory repository are the fleet's (`StoreRun`): the run is a worker of its own on the store and holds the lease of
each conversation it writes for as long as it runs, so a conversation a server worker (or
another run) is running is refused before anything is written, and one this run holds is
refused to them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.backends.local.locks import state_failure
from tether.cli.flags import CommandLineFlags, RunFlags
from tether.cli.output import Renderer, StdoutGone, init_fields, report_failure, say
from tether.cli.stopping import RunStop
from tether.core.approvals import JudgedCall
from tether.core.permissions import headless_denial
from tether.core.tools import Effect, ToolContext
from tether.core.turn import ApprovalAnswer, Event, TurnOutcome
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.messages import TextPart
from tether.protocol.turns import LocalToolCall, TurnError
from tether.runtime.extensions.turn_hooks import (
    MAX_STOP_CONTINUATIONS,
    STOP_HOOK,
    HookOutcome,
    TurnHooks,
)
from tether.runtime.turns.inbox import Inbox, Submission, TurnPlan, user_message

if TYPE_CHECKING:
    from tether.runtime.session.prepared import Prepared


PLAN_SHOWN = ("headless run: the plan is printed for the user, who runs tether again to carry "
              "it out")


class HeadlessApprover:
    """One-shot headless has nobody to ask: every `ask` is denied with the hint that would allow it.
    A plan handed over with ExitPlanMode (plan mode) ends the run: the plan is its result."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.plan: str | None = None

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        if item.call.name == "ExitPlanMode" and ctx.permission_mode == "plan":
            plan = item.args.get("plan")
            self.plan = plan if isinstance(plan, str) and plan.strip() else None
            if self.plan is not None:
                return ApprovalAnswer(False, PLAN_SHOWN, interrupt=True)
        effect = item.tool.effect if item.tool is not None else Effect.EXEC
        message = headless_denial(item.call.name, effect, self.mode)
        return ApprovalAnswer(False, f"{message} ({item.decision.reason})")


class OneShotTurn:
    """The one turn of `tether -p` as the inbox runs it: events to the renderer, approvals
    denied, the exit code kept; the memory review awaited (the run ends after it).

    SessionStart hooks run before the prompt (their context goes with it) and SessionEnd hooks
    as the run ends. The prompt goes through the UserPromptSubmit hooks first (a block is the
    run's error; their context goes with the prompt), and a turn that ends is put to the Stop
    hooks: a block's feedback is the next turn of the same run (`continuation`), as in Claude
    Code."""

    def __init__(self, flags: RunFlags, renderer: Renderer, stop: RunStop, started: float) -> None:
        self.flags = flags
        self.renderer = renderer
        self.stop = stop
        self.started = started
        self.state_failed = False
        self.code = 1
        self.inbox: Inbox | None = None
        self.continuation: Submission | None = None  # a Stop hook's feedback, run next
        self.continuations = 0
        self.tool_calls = 0
        self.prompt = ""
        self.from_hook = False
        self.session_context: list[TextPart] = []  # SessionStart's, sent with the first prompt
        self.approver = HeadlessApprover(flags.permission_mode)

    def emit(self, event: Event) -> None:
        if isinstance(event, LocalToolCall):
            self.tool_calls += 1
        if isinstance(event, TurnError) and self.approver.plan is not None and event.stop_reason == "cancelled":
            return  # the run stopped at the plan on purpose (see `end`)
        self.renderer.on_event(self.stop.retitle(event))

    @property
    def hooks(self) -> TurnHooks:
        """The session's SessionStart/End, prompt and Stop hooks; none in a subagent (its prompt
        is the parent's task, not a user's, and its end is the parent's SubagentStop)."""
        assert self.inbox is not None
        prepared = self.inbox.prepared
        subagent = prepared.env.get("TETHER_AGENT_ROLE") == "subagent"
        return TurnHooks(None if subagent else prepared.hooks)

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        parts = [p for item in batch for p in item.parts]
        self.from_hook, self.tool_calls = batch[0].source == STOP_HOOK, 0
        if not self.from_hook:
            self.prompt = "\n\n".join(p.text for p in parts if isinstance(p, TextPart))
            submitted = tell(await self.hooks.prompt_submit(self.prompt))
            if submitted.blocked is not None:
                blocked = TurnError(f"Prompt blocked by a UserPromptSubmit hook: {submitted.blocked}",
                                    "error")
                self.emit(blocked)
                self.code = self._finish(TurnOutcome(stop_reason="error", error=blocked))
                return None
            parts += self.session_context + submitted.context
            self.session_context = []
        return TurnPlan(
            user=user_message(parts), emit=self.emit,
            approver=self.approver, max_turns=self.flags.max_turns,
            on_store_unavailable=self.stop.on_store_unavailable,
        )

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        """A busy conversation, a damaged transcript, a full disk: the run's error."""
        message = state_failure(exc)
        if message is None and not isinstance(exc, TetherError):
            raise exc
        self.state_failed = message is not None
        failure = TurnError(message or str(exc), "error")
        self.emit(failure)
        return TurnOutcome(stop_reason="error", error=failure)

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        stop = self.stop
        plan = self.approver.plan
        if plan is not None and outcome.interrupted and not stop.abort.is_set():
            outcome.error, outcome.stop_reason, outcome.last_text = None, "end_turn", plan
            self.code = self._finish(outcome)  # the plan, printed; the run stops there
            return False
        if outcome.error is not None:
            outcome.error = stop.retitle(outcome.error)
            outcome.stop_reason = outcome.error.stop_reason
        assert self.inbox is not None
        if await self._continues(outcome):
            return False  # the result is the continuation's
        self.code = self._finish(outcome)
        if self.code == 0:
            await self.inbox.conversation.reflect(stop.abort)
        return False  # reflected above, not in the background

    async def _continues(self, outcome: TurnOutcome) -> bool:
        """A Stop hook that blocks an ended turn: its feedback is queued as the next turn."""
        if outcome.error is not None or outcome.stop_reason != "end_turn" or self.stop.abort.is_set():
            return False
        stopped = tell(await self.hooks.stop(
            stop_reason=outcome.stop_reason, tool_call_count=self.tool_calls,
            assistant_message=outcome.last_text, user_message=self.prompt, active=self.from_hook,
        ))
        if stopped.blocked is None or self.continuations >= MAX_STOP_CONTINUATIONS:
            return False
        self.continuations += 1
        assert self.inbox is not None
        feedback = stopped.blocked
        self.continuation = self.inbox.put(
            Submission(parts=(TextPart(feedback),), payload=feedback, source=STOP_HOOK,
                       coalesce=False, abort=self.stop.abort), front=True,
        )
        return True

    def _finish(self, outcome: TurnOutcome) -> int:
        assert self.inbox is not None
        return self.renderer.finish(
            outcome,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            api_ms=self.inbox.prepared.backend.api_ms,
            result_on_error=self.state_failed or self.stop.failure is not None,
        )


def tell(outcome: HookOutcome) -> HookOutcome:
    """A hook's notices on stderr (errors; never the context, which goes to the model)."""
    for text, _kind in outcome.notices:
        say(f"tether: {text}")
    return outcome


def report_failed_servers(servers: Sequence[dict[str, object]]) -> None:
    """Each MCP server that did not start, on stderr: text and json runs print no init event,
    and a run without the server's tools should not look like a run with them."""
    for server in servers:
        if server.get("status") == "failed":
            say(f"tether: MCP server {server.get('name')!r} failed to start: {server.get('error') or 'no reason given'}")


def check_for_updates(prepared: Prepared) -> Prepared:
    """The daily update check: a stat and a small read on most runs; the network and any
    install happen in a detached child, and the next start prints what it did."""
    from tether.runtime.updater import startup_check

    startup_check(prepared.env, prepared.store.home)
    return prepared


class StoreRun:
    """`--store`: this run as a worker of the fleet's PostgreSQL store (`tether server
    --store`'s session pieces, `runtime/session/pg_store.py`), with its own name, the store's
    `PgConversationStore` whose writes take and are fenced by this run's leases
    (`backends/postgres/solo_lease.py`), and the store's effect checkpoints."""

    def __init__(self, url: str) -> None:
        import uuid

        from tether.backends.postgres.agents import PgConversationStore
        from tether.backends.postgres.solo_lease import SoloLeases
        from tether.runtime.session.pg_store import open_pg_store
        from tether.runtime.session.session import tether_home

        self.worker = f"headless-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.pg = open_pg_store(url, self.worker)  # unreachable: fails here, naming it
        self.leases = SoloLeases(self.pg.session, on_lost=_lost)
        self.store = PgConversationStore(
            self.pg.session, tether_home(os.environ), self.leases.lease_of
        )
        self.prepared: Prepared | None = None

    def hold_named(self, flags: RunFlags) -> None:
        """The lease of the conversation the flags name, before anything is assembled: one
        another worker runs fails the run with nothing written."""
        from tether.backends.store_api import conversation_ref

        if flags.conversation not in (None, "default"):
            agent_id = self.store.get_conversation(flags.conversation).agent_id
            self.leases.take(conversation_ref(agent_id, flags.conversation))
        elif flags.conversation == "default" and flags.agent:
            self.leases.take(conversation_ref(flags.agent, "default"))

    def hold(self, prepared: Prepared) -> Prepared:
        """The lease of the conversation the run resolved (a new one's), before its first turn;
        its effect checkpoints go to the store under this worker's name, as a server's do."""
        from tether.backends.store_api import conversation_ref

        session = prepared.session
        self.leases.take(conversation_ref(session.agent.id, session.conversation_id))
        prepared.checkpoint_store = (self.pg.checkpoints, self.worker)
        prepared.shared_checkpoints = True  # closed with the session, by `close`
        self.prepared = prepared
        self.sync_memory()  # the store's memory commits, before the first prompt is built
        return prepared

    def sync_memory(self) -> None:
        """The agent's memory repo here and the store's copy brought to one head, as a server
        worker does at a turn's boundaries (`backends/postgres/memory_sync.py`); a failure is
        logged and never the run's."""
        if self.prepared is None:
            return
        from tether.backends.postgres.memory_sync import MemoryRepos, sync_logged
        from tether.memory.memfs import MemFS, memory_dir

        agent = self.prepared.session.agent
        memfs = MemFS(memory_dir(self.store.home, agent.id), agent_id=agent.id,
                      agent_name=agent.name)
        if memfs.exists:  # none when git is off
            sync_logged(memfs, MemoryRepos(self.pg.session), self.worker)

    def close(self) -> None:
        """Store what the run committed to memory (its reflection included), give the leases
        up (a server worker may take the conversations at once), then end the session (and
        with it this worker's presence)."""
        try:
            self.sync_memory()
        except (TetherError, OSError) as exc:  # the run's answer stands; say what was left
            say(f"tether: while shutting down: the memory repository was not stored: {exc}")
        finally:
            try:
                self.leases.close()
            finally:
                self.pg.session.close()


def _lost(conversation: str, why: str) -> None:
    say(f"tether: this run lost conversation {conversation.partition('/')[2]} to another worker "
        f"({why}); its further writes there are refused")


def _prepare(flags: RunFlags, store_run: StoreRun | None) -> Prepared:
    """`cli/runner.prepare`, on the fleet's store with `--store` (the named conversation held
    before anything is assembled, the resolved one before the first turn)."""
    from tether.cli.runner import prepare

    if store_run is None:
        return check_for_updates(prepare(flags))
    store_run.hold_named(flags)
    return check_for_updates(store_run.hold(prepare(flags, store_run.store)))


def run_headless(flags: RunFlags) -> int:
    url = flags.store if isinstance(flags, CommandLineFlags) else None
    if url is None:
        return _run_headless(flags, None)
    try:
        store_run = StoreRun(url)
    except TetherError as exc:  # a database that cannot be reached, named without its password
        say(f"Error: {exc}")
        return 1
    try:
        return _run_headless(flags, store_run)
    finally:
        store_run.close()


def _run_headless(flags: RunFlags, store_run: StoreRun | None) -> int:
    started = time.monotonic()
    try:
        from tether.cli.runner import read_prompt

        if flags.input_format == "stream-json":
            from tether.cli.bidirectional import run_bidirectional

            return run_bidirectional(_prepare(flags, store_run))
        prompt = read_prompt(flags)
        prepared = _prepare(flags, store_run)
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
        turn = OneShotTurn(flags, renderer, stop, started)
        inbox = turn.inbox = Inbox(prepared, turn)
        try:
            servers = await prepared.start_tool_sources(abort)  # connected or failed, each bounded
            if flags.output_format != "stream-json":  # no init event to read it from
                report_failed_servers(servers)
            renderer.emit_init(**init_fields(prepared))
            turn.session_context = tell(await turn.hooks.open_session(prepared)).context
            submitted = inbox.submit((TextPart(prompt),), abort=abort)  # a signal aborts it
            assert submitted.done is not None
            await submitted.done  # an error the turn could not report (stdout gone) is raised
            while (continuation := turn.continuation) is not None:  # a Stop hook's feedback
                turn.continuation = None
                assert continuation.done is not None
                await continuation.done
            return stop.exit_code(turn.code)
        finally:
            try:
                await inbox.close("the run ended", before_shutdown=turn.hooks.session_end)
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
